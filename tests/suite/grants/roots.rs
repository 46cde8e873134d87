//! The client's roots as grant candidates, with a real client that offers them: they are
//! read and listed (`warden://settings`, `request_grant`'s description), read again when
//! the client says they changed (and the client is told the tools changed), a root the
//! server cannot use is refused with the reason, and a root is still granted only by the
//! person's consent: the code cannot reach it before, nor after a decline; after an
//! approval it can, and the question said the path is one of the client's roots.
#![allow(deprecated)]

use std::path::Path;
use std::sync::atomic::Ordering;

use rmcp::model::Root;
use serde_json::{Value, json};

use super::super::{As, Net, both_modes, data_dir_for, server_command_as, stdout, until_some};
use super::{Answer, Harness, read_code, shared_dir};

fn root(path: &Path, name: &str) -> Root {
    let mut r = Root::new(format!("file://{}", path.display()));
    r.name = Some(name.to_string());
    r
}

async fn start(who: As, answer: Answer, roots: Option<Vec<Root>>) -> Harness {
    let data = data_dir_for(who);
    // Guard off: the OS layer alone must keep a root out of reach until it is granted.
    let env = [("CODEGUARD", "off")];
    let cmd = server_command_as(who, Net::Host, &env, &[], data.path());
    Harness::start_person(cmd, data, answer, roots).await
}

/// The settings' `client_roots`, once `done` holds of it (the server reads roots in the
/// background); the last one read otherwise.
async fn roots_when(h: &Harness, done: impl Fn(&Value) -> bool) -> Value {
    let read = async || h.settings().await["client_roots"].clone();
    let every = std::time::Duration::from_millis(50);
    match until_some(200, every, async || Some(read().await).filter(&done)).await {
        Some(roots) => roots,
        None => read().await,
    }
}

fn paths(roots: &Value) -> Vec<String> {
    roots["roots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["path"].as_str().unwrap().to_string())
        .collect()
}

async fn grant_description(h: &Harness) -> String {
    let tools = h.client.list_all_tools().await.unwrap();
    let grant = tools.iter().find(|t| t.name == "request_grant").unwrap();
    grant.description.as_deref().unwrap_or_default().to_string()
}

#[tokio::test]
async fn roots_are_listed_reread_and_granted_only_by_consent() {
    for who in both_modes() {
        let (_a, dir_a) = shared_dir("alpha rows");
        let (_b, dir_b) = shared_dir("beta rows");
        let offered = vec![
            root(&dir_a, "project"),
            Root::new("https://example.com/repo"),
            Root::new("file:///"),
        ];
        let h = start(who, Answer::Decline, Some(offered)).await;
        let a = dir_a.display().to_string();
        let b = dir_b.display().to_string();
        let seen = roots_when(&h, |r| !r["roots"].as_array().is_none_or(Vec::is_empty)).await;
        assert_eq!(seen["offered"], true, "{seen}");
        assert_eq!(paths(&seen), vec![a.clone()], "{seen}");
        assert_eq!(seen["roots"][0]["name"], "project");
        let why: Vec<&str> = seen["refused"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["why"].as_str().unwrap())
            .collect();
        assert_eq!(
            why,
            vec!["not a file:// URI", "is the whole file system (`/`)"]
        );
        let description = grant_description(&h).await;
        assert!(
            description.contains("Paths the user has open") && description.contains(&a),
            "{description}"
        );
        // A root is no grant: the code cannot reach it.
        assert_eq!(stdout(&h.run(&read_code(&dir_a)).await), "denied 2\n");

        // The client's roots change: the server reads them again and says the tools did.
        let changed_before = h.person.tools_changed.load(Ordering::SeqCst);
        *h.person.roots.lock().unwrap() = Some(vec![root(&dir_a, "project"), root(&dir_b, "beta")]);
        h.client.notify_roots_list_changed().await.unwrap();
        let seen = roots_when(&h, |r| r["roots"].as_array().is_some_and(|l| l.len() == 2)).await;
        assert_eq!(paths(&seen), vec![a.clone(), b.clone()], "{seen}");
        assert!(seen["refused"].as_array().unwrap().is_empty());
        let changed =
            async || (h.person.tools_changed.load(Ordering::SeqCst) > changed_before).then_some(());
        let every = std::time::Duration::from_millis(50);
        assert!(
            until_some(100, every, changed).await.is_some(),
            "tools changed"
        );
        assert!(grant_description(&h).await.contains(&b));

        // Declined: nothing granted, the code still cannot reach it.
        let (_, r) = h.grant(&dir_b, "read").await;
        assert_eq!(r["granted"], false, "{r}");
        assert_eq!(stdout(&h.run(&read_code(&dir_b)).await), "denied 2\n");
        // Approved: granted, and the question said it is one of the client's roots.
        *h.person.answer.lock().unwrap() = Answer::Approve;
        let (_, r) = h.grant(&dir_a, "read").await;
        assert_eq!(r["granted"], true, "{r}");
        assert_eq!(
            stdout(&h.run(&read_code(&dir_a)).await).trim(),
            "alpha rows"
        );
        let asked = h.asked();
        assert_eq!(asked.len(), 2, "{asked:#?}");
        assert!(
            asked[1].contains("one of the folders you have open in this client (\"project\")"),
            "{}",
            asked[1]
        );
        assert!(asked[0].contains("(\"beta\")"), "{}", asked[0]);
        let (_, list) = h.call("list_grants", json!({})).await;
        assert_eq!(list["grants"].as_array().map(Vec::len), Some(1), "{list}");
        h.client.cancel().await.unwrap();
    }
}

/// A client that declares no roots is never asked for them, and the settings say so.
#[tokio::test]
async fn a_client_without_roots_has_none_listed() {
    let h = start(As::Root, Answer::Decline, None).await;
    let seen = h.settings().await["client_roots"].clone();
    assert_eq!(seen["offered"], false, "{seen}");
    assert!(seen["roots"].as_array().unwrap().is_empty());
    assert!(
        !grant_description(&h)
            .await
            .contains("Paths the user has open")
    );
}
