//! The egress proxy's probes, run when the network is proxied: code in a real worker
//! asks the proxy for what it must refuse, and each answer is judged from the server's
//! side (the proxy's own refusal of that host, not merely an error the code saw). No
//! probe makes the proxy resolve a name through DNS or send a packet off this machine,
//! except `net.proxy_allowed`, which goes where the operator pointed it.

use std::time::Duration;

use crate::backend::Worker;
use crate::config::{NetworkMode, Settings};
use crate::selftest::report::{ProbeResult, ProbeStatus};

/// One request the proxy must refuse: probe id, URL, what it shows.
struct Refusal {
    id: &'static str,
    url: &'static str,
    /// The host as the proxy's refusal names it.
    host: &'static str,
    what: &'static str,
}

/// What every proxied network must refuse, whatever the lists say: a name that resolves
/// to loopback (the hosts file, no DNS), the cloud metadata address, and an LLM API host
/// (refused by name, before any resolution).
const REFUSALS: &[Refusal] = &[
    Refusal {
        id: "net.proxy_loopback_name",
        url: "http://localhost/",
        host: "localhost:80",
        what: "a name resolving to 127.0.0.1",
    },
    Refusal {
        id: "net.proxy_metadata",
        url: "http://169.254.169.254/latest/meta-data/",
        host: "169.254.169.254:80",
        what: "the cloud metadata address",
    },
    Refusal {
        id: "net.proxy_llm_host",
        url: "https://api.anthropic.com/",
        host: "api.anthropic.com:443",
        what: "an LLM API host",
    },
];

/// A host no allow list names: refused by name in `proxy` mode (in `allow` mode every
/// public host passes, so the probe does not apply).
const NOT_ALLOWED: Refusal = Refusal {
    id: "net.proxy_not_allowed",
    url: "http://warden-selftest.invalid/",
    host: "warden-selftest.invalid:80",
    what: "a host no allow list names",
};

/// The probe code: fetches each URL through the proxy the environment names and prints
/// `id status` per line (an HTTP status, or the exception's name); then tries DNS.
fn code(urls: &[(&str, &str)]) -> String {
    let mut out = String::from(
        "import socket, urllib.request\n\
         def fetch(url):\n    \
             try:\n        \
                 return str(urllib.request.urlopen(url, timeout=20).status)\n    \
             except Exception as e:\n        \
                 code = getattr(e, 'code', None)\n        \
                 return str(code) if code else ('403' if '403' in str(e) else type(e).__name__)\n",
    );
    for (id, url) in urls {
        out.push_str(&format!("print({id:?}, fetch({url:?}))\n"));
    }
    out.push_str(
        "try:\n    socket.getaddrinfo('example.com', 80)\n    print('net.world_dns', 'resolved')\n\
         except OSError as e:\n    print('net.world_dns', type(e).__name__)\n",
    );
    out
}

/// Runs the probes in `worker` and judges them (none unless the network is proxied);
/// also says whether the worker can be used again.
pub async fn probes(worker: &mut Worker, settings: &Settings) -> (Vec<ProbeResult>, bool) {
    if !settings.network.proxied() {
        return (Vec::new(), true);
    }
    let mut refusals: Vec<&Refusal> = REFUSALS.iter().collect();
    if settings.network == NetworkMode::Proxy {
        refusals.push(&NOT_ALLOWED);
    }
    let mut urls: Vec<(&str, &str)> = refusals.iter().map(|r| (r.id, r.url)).collect();
    let target = settings.egress.probe_url.clone();
    if let Some(url) = &target {
        urls.push(("net.proxy_allowed", url));
    }
    let run = worker
        .execute(&code(&urls), &[], Duration::from_secs(90), 1 << 16)
        .await;
    let text = run.stdout_text();
    let answer = |id: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(id)?.strip_prefix(' '))
            .unwrap_or("")
            .to_string()
    };
    let noted = worker.take_egress_refusals().join("\n");
    let mut out: Vec<ProbeResult> = refusals
        .iter()
        .map(|r| judge_refusal(r, &answer(r.id), &noted))
        .collect();
    out.push(judge_dns(&answer("net.world_dns")));
    out.push(judge_allowed(
        target.as_deref(),
        &answer("net.proxy_allowed"),
    ));
    (out, run.reusable)
}

/// Blocked only when the code got a 403 and the proxy itself recorded refusing the host.
fn judge_refusal(r: &Refusal, answer: &str, noted: &str) -> ProbeResult {
    let by_proxy = noted
        .lines()
        .any(|l| l.starts_with(&format!("egress refused {}:", r.host)));
    let (status, details) = match (answer, by_proxy) {
        ("403", true) => (
            ProbeStatus::Blocked,
            format!("the proxy refused {} ({})", r.what, r.host),
        ),
        ("200", _) => (
            ProbeStatus::Allowed,
            format!("{} was fetched through the proxy", r.what),
        ),
        (other, _) => (
            ProbeStatus::Inconclusive,
            format!(
                "{}: the code saw {other:?}, the proxy recorded {}",
                r.what,
                if by_proxy { "a refusal" } else { "no refusal" }
            ),
        ),
    };
    result(r.id, status, details, true)
}

fn judge_dns(answer: &str) -> ProbeResult {
    let (status, details) = match answer {
        "resolved" => (
            ProbeStatus::Allowed,
            "a name resolved inside the world".into(),
        ),
        "gaierror" | "OSError" | "PermissionError" => (
            ProbeStatus::Blocked,
            format!("no name resolves inside the world ({answer}); the proxy resolves"),
        ),
        other => (
            ProbeStatus::Inconclusive,
            format!("unexpected answer {other:?}"),
        ),
    };
    result("net.world_dns", status, details, true)
}

fn judge_allowed(target: Option<&str>, answer: &str) -> ProbeResult {
    let Some(url) = target else {
        return ProbeResult {
            category: "egress".into(),
            ..result(
                "net.proxy_allowed",
                ProbeStatus::Inconclusive,
                "no target: set SANDBOX_EGRESS_PROBE_URL to a URL the allow list names".into(),
                false,
            )
        };
    };
    // The one probe whose success is expected: it shows the proxy works. Its category is
    // not `network`, whose isolation it would otherwise read as broken.
    let (status, details) = if answer.starts_with('2') || answer.starts_with('3') {
        (
            ProbeStatus::Allowed,
            format!("{url} answered {answer} through the proxy"),
        )
    } else {
        (
            ProbeStatus::Inconclusive,
            format!("{url} through the proxy: {answer:?}"),
        )
    };
    ProbeResult {
        category: "egress".into(),
        ..result("net.proxy_allowed", status, details, false)
    }
}

fn result(id: &str, status: ProbeStatus, details: String, required: bool) -> ProbeResult {
    ProbeResult {
        id: id.into(),
        category: "network".into(),
        status,
        details,
        required,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_counts_only_with_the_proxys_own_record() {
        let r = &REFUSALS[0];
        let noted = "egress refused localhost:80: localhost resolves to a refused address";
        assert_eq!(judge_refusal(r, "403", noted).status, ProbeStatus::Blocked);
        assert_eq!(
            judge_refusal(r, "403", "").status,
            ProbeStatus::Inconclusive
        );
        assert_eq!(judge_refusal(r, "200", "").status, ProbeStatus::Allowed);
        assert_eq!(
            judge_refusal(r, "URLError", noted).status,
            ProbeStatus::Inconclusive
        );
    }

    #[test]
    fn dns_and_the_allowed_target_are_judged_by_their_answers() {
        assert_eq!(judge_dns("gaierror").status, ProbeStatus::Blocked);
        assert_eq!(judge_dns("resolved").status, ProbeStatus::Allowed);
        assert_eq!(judge_allowed(None, "").status, ProbeStatus::Inconclusive);
        assert_eq!(
            judge_allowed(Some("http://x.test/"), "200").status,
            ProbeStatus::Allowed
        );
    }
}
