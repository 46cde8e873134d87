//! `SANDBOX_PACKAGES=ask`: an install waits for the person, who is shown every
//! requirement and where the wheels come from; approved, it installs and the audit log
//! says who approved it; declined, nothing changes and the result says why.

use serde_json::json;

use super::super::packages::index_dir;
use super::super::{both_modes, stdout};
use super::{Answer, Harness};

#[tokio::test]
async fn an_install_under_ask_waits_for_the_person() {
    let files = index_dir().join("files").display().to_string();
    for who in both_modes() {
        let env = [
            ("CODEGUARD", "enforce"),
            ("SANDBOX_PACKAGES", "ask"),
            ("SANDBOX_WHEELHOUSE", files.as_str()),
        ];
        let h = Harness::start_env(who, Answer::Decline, &[], &env).await;
        let install = json!({"session": "g", "packages": ["wtiny>=1"]});
        let (is_error, r) = h.call("install_packages", install.clone()).await;
        assert!(is_error, "{who:?}: {r}");
        assert_eq!(r["error"]["type"], "ConsentRefused", "{who:?}: {r}");
        let asked = h.asked();
        assert_eq!(asked.len(), 1, "{who:?}: {asked:?}");
        assert!(asked[0].contains("wtiny>=1"), "{who:?}: {asked:?}");
        assert!(asked[0].contains(&files), "{who:?}: {asked:?}");
        assert_eq!(
            h.run("import wtiny").await["error"]["type"],
            "ModuleNotFoundError",
            "{who:?}"
        );
        *h.person.answer.lock().unwrap() = Answer::Approve;
        let (is_error, r) = h.call("install_packages", install).await;
        assert!(!is_error, "{who:?}: {r}");
        assert_eq!(
            stdout(&h.run("import wtiny\nprint(wtiny.VALUE)").await),
            "42\n"
        );
        let records = super::super::audit::records(h.data_dir());
        let requested: Vec<&str> = records
            .iter()
            .filter(|r| r["phase"] == "packages" && r["decision"] == "requested")
            .filter_map(|r| r["detail"].as_str())
            .collect();
        assert!(
            requested
                .iter()
                .any(|d| d.contains("approved by user via elicitation")),
            "{who:?}: {requested:?}"
        );
        assert!(
            records.iter().any(|r| r["phase"] == "packages"
                && r["decision"] == "refused"
                && r["detail"].as_str().unwrap_or("").contains("declined")),
            "{who:?}: the declined install is recorded: {records:?}"
        );
    }
}
