//! `auto://`'s choice of transport, logged at INFO once per endpoint (and again when it
//! changes), at DEBUG for every later connection: a pool of a thousand connections says
//! once why it runs on TCP, not a thousand times.

use std::collections::HashMap;
use std::sync::OnceLock;

use parking_lot::Mutex;
use rdmarpc_core::Endpoint;

/// Endpoints remembered at most; beyond, the memory starts over (each says its choice
/// once more).
const MAX_ENDPOINTS: usize = 4096;

fn seen() -> &'static Mutex<HashMap<String, String>> {
    static SEEN: OnceLock<Mutex<HashMap<String, String>>> = OnceLock::new();
    SEEN.get_or_init(Mutex::default)
}

/// Whether `choice` is new for `endpoint` (first, or other than the last one).
fn is_news(endpoint: &str, choice: &str) -> bool {
    let mut seen = seen().lock();
    if seen.get(endpoint).is_some_and(|last| last == choice) {
        return false;
    }
    if seen.len() >= MAX_ENDPOINTS {
        seen.clear();
    }
    seen.insert(endpoint.to_owned(), choice.to_owned());
    true
}

/// Longest text logged for a choice: a server's refusal reason is the peer's text.
const MAX_TEXT: usize = 300;

/// Logs `auto: {text}` for a connection to `endpoint`, at INFO when its `kind` (a few
/// words of this side's own: `rdma` and the route, `tcp: refused by the server`...)
/// differs from the endpoint's last one. The text is cut to [`MAX_TEXT`] characters and
/// its control characters replaced, so a server's reason cannot forge log lines.
pub(super) fn log(endpoint: &Endpoint, kind: &str, text: &str) {
    let text = clean(text);
    if is_news(&endpoint.to_string(), kind) {
        tracing::info!(%endpoint, "auto: {text}");
    } else {
        tracing::debug!(%endpoint, "auto: {text}");
    }
}

/// `text` cut to [`MAX_TEXT`] characters, its control characters replaced by `?`.
fn clean(text: &str) -> String {
    text.chars()
        .take(MAX_TEXT)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_choice_is_news_once_per_endpoint_and_again_when_it_changes() {
        let (a, b) = ("auto://10.0.0.1:1", "auto://10.0.0.2:1");
        assert!(is_news(a, "using RDMA on rxe0"));
        assert!(!is_news(a, "using RDMA on rxe0"));
        assert!(is_news(b, "using RDMA on rxe0"), "another endpoint");
        assert!(is_news(a, "using TCP (the link is down)"), "a change");
        assert!(is_news(a, "using RDMA on rxe0"), "and back");
        assert!(!is_news(a, "using RDMA on rxe0"));
        for i in 0..MAX_ENDPOINTS {
            is_news(&format!("auto://10.1.0.{i}:1"), "x");
        }
        assert!(seen().lock().len() <= MAX_ENDPOINTS);
    }

    #[test]
    fn a_servers_reason_cannot_forge_log_lines_or_flood() {
        let forged = "no\n2026-12-03T00:00:00Z  INFO fake line\r";
        assert_eq!(clean(forged), "no?2026-12-03T00:00:00Z  INFO fake line?");
        assert_eq!(clean(&"x".repeat(5000)).len(), MAX_TEXT);
    }
}
