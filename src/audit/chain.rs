//! The keyed chain: how one record is sealed as a JSON line (an HMAC-SHA256, under the
//! log's key, over the exact bytes of the line without its `mac` field, which include the
//! previous record's MAC and a sequence number) and how a run of lines is checked against
//! it. Pure: bytes in, verdicts out.

use hmac::{KeyInit, Mac};
use serde::{Deserialize, Serialize};

use super::AuditEvent;

/// The `prev` of the first record of a chain.
pub const ZERO: &str = "0000000000000000000000000000000000000000000000000000000000000000";

const MAC_FIELD: &str = ",\"mac\":\"";
/// `,"mac":"` + 64 hex digits + `"}`.
const MAC_SUFFIX_LEN: usize = MAC_FIELD.len() + 64 + 2;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The log's secret: 32 random bytes, kept in a 0600 file beside the segments.
#[derive(Clone)]
pub struct Key([u8; 32]);

impl Key {
    pub fn generate() -> Key {
        Key(crate::random_bytes())
    }

    pub fn from_hex(text: &str) -> Option<Key> {
        let text = text.trim();
        if text.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(Key(out))
    }

    pub fn to_hex(&self) -> String {
        crate::hex(&self.0)
    }

    /// HMAC-SHA256 of `body`, in hex.
    pub fn mac(&self, body: &[u8]) -> String {
        self.mac_parts(&[body])
    }

    /// HMAC-SHA256 of the concatenation of `parts`, in hex.
    pub fn mac_parts(&self, parts: &[&[u8]]) -> String {
        let Ok(mut m) = <HmacSha256 as KeyInit>::new_from_slice(&self.0) else {
            // HMAC takes keys of any length; this cannot happen.
            return ZERO.to_string();
        };
        for p in parts {
            m.update(p);
        }
        crate::hex(&m.finalize().into_bytes())
    }
}

/// A record without its MAC: what the MAC covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Body {
    /// Position in the whole log, from 1; consecutive across segments.
    pub seq: u64,
    /// The server that wrote it (`<pid>-<random>`, as its instance directory).
    pub instance: String,
    #[serde(flatten)]
    pub event: AuditEvent,
    /// The previous record's MAC ([`ZERO`] for the first record of a chain).
    pub prev: String,
}

/// One sealed line (without its newline) and its MAC.
pub fn seal(key: &Key, body: &Body) -> Result<(String, String), serde_json::Error> {
    let mut text = serde_json::to_string(body)?;
    let mac = key.mac(text.as_bytes());
    text.pop(); // the closing brace
    text.push_str(MAC_FIELD);
    text.push_str(&mac);
    text.push_str("\"}");
    Ok((text, mac))
}

/// What checking the chain needs of a record (the rest is covered by the MAC).
#[derive(Debug, Deserialize)]
pub struct Head {
    pub seq: u64,
    pub prev: String,
    pub phase: String,
    pub decision: String,
}

impl Head {
    /// A chain may start (from [`ZERO`]) only at the very first record, or at a break
    /// record that opens a segment after a broken one was set aside.
    pub fn is_break(&self) -> bool {
        self.phase == "audit" && self.decision == "break"
    }
}

/// Checks one line's MAC and reads what the chain needs. The problem text says what is
/// wrong.
pub fn unseal(key: &Key, line: &[u8]) -> Result<(Head, String), String> {
    let n = line.len();
    let split = n
        .checked_sub(MAC_SUFFIX_LEN)
        .filter(|s| line[*s..].starts_with(MAC_FIELD.as_bytes()) && line.ends_with(b"\"}"));
    let Some(split) = split else {
        return Err("not a sealed audit record (no MAC at its end)".to_string());
    };
    let mac = std::str::from_utf8(&line[split + MAC_FIELD.len()..n - 2])
        .map_err(|_| "not a sealed audit record (no MAC at its end)".to_string())?;
    if key.mac_parts(&[&line[..split], b"}"]) != mac {
        return Err(
            "its MAC does not match its content: it was edited, or written without this log's key"
                .to_string(),
        );
    }
    let head: Head = serde_json::from_slice(line)
        .map_err(|e| format!("sealed, but not an audit record: {e}"))?;
    Ok((head, mac.to_string()))
}

/// The whole record of a sealed line (for break records, whose detail is reported).
pub fn body_of(line: &[u8]) -> Option<Body> {
    serde_json::from_slice(line).ok()
}

/// Where a chain stands: the last record's sequence number and MAC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pos {
    pub seq: u64,
    pub tail: String,
}

impl Pos {
    /// Before the first record.
    pub fn genesis() -> Pos {
        Pos {
            seq: 0,
            tail: ZERO.to_string(),
        }
    }
}

/// The first bad record found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Line number within its segment, from 1.
    pub line: u64,
    /// Its sequence number, when it could be read.
    pub seq: Option<u64>,
    pub problem: String,
}

/// What checking a run of lines found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Walk {
    /// After the last good record.
    pub pos: Pos,
    /// Bytes of good, complete lines.
    pub consumed: u64,
    /// Good lines.
    pub lines: u64,
    pub broken: Option<Finding>,
    /// Bytes after the last newline: a record whose write never finished.
    pub torn: u64,
    /// Break records seen (the chain restarted after a broken segment was set aside).
    pub restarts: Vec<Body>,
}

/// Checks the lines of `bytes` (which starts at a line boundary of a segment, `line_base`
/// lines in) as a continuation of `pos`. With `pos` `None` the first line is trusted to
/// start wherever it starts (checking one file on its own).
pub fn walk(key: &Key, bytes: &[u8], pos: Option<Pos>, line_base: u64) -> Walk {
    let mut walk = Walk {
        pos: pos.clone().unwrap_or_else(Pos::genesis),
        consumed: 0,
        lines: 0,
        broken: None,
        torn: 0,
        restarts: Vec::new(),
    };
    let mut known = pos.is_some();
    let mut rest = bytes;
    while !rest.is_empty() {
        let Some(end) = memchr::memchr(b'\n', rest) else {
            walk.torn = rest.len() as u64;
            break;
        };
        let line_no = line_base + walk.lines + 1;
        let fail = |seq: Option<u64>, problem: String| Finding {
            line: line_no,
            seq,
            problem,
        };
        let (body, mac) = match unseal(key, &rest[..end]) {
            Ok(ok) => ok,
            Err(problem) => {
                walk.broken = Some(fail(None, problem));
                return walk;
            }
        };
        let restart = body.prev == ZERO
            && ((walk.pos.seq == 0 && body.seq == 1) || (line_no == 1 && body.is_break()));
        if known && !restart {
            if body.prev != walk.pos.tail {
                walk.broken = Some(fail(
                    Some(body.seq),
                    "does not follow the record before it (a record was removed, inserted, \
                     reordered or edited)"
                        .to_string(),
                ));
                return walk;
            }
            if body.seq != walk.pos.seq + 1 {
                walk.broken = Some(fail(
                    Some(body.seq),
                    format!(
                        "its sequence number is {}, expected {}",
                        body.seq,
                        walk.pos.seq + 1
                    ),
                ));
                return walk;
            }
        }
        if restart
            && body.is_break()
            && let Some(full) = body_of(&rest[..end])
        {
            walk.restarts.push(full);
        }
        known = true;
        walk.pos = Pos {
            seq: body.seq,
            tail: mac,
        };
        walk.lines += 1;
        walk.consumed += end as u64 + 1;
        rest = &rest[end + 1..];
    }
    walk
}

/// The signed checkpoint: how far the log has been checked, so that start-up checks only
/// what was written since.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The segment being appended to, and how many of its bytes were checked.
    pub segment: u64,
    pub offset: u64,
    pub pos: Pos,
    /// Earlier segments and their final sizes (a changed size is an edit).
    pub sealed: Vec<(u64, u64)>,
}

/// The checkpoint as sealed text.
pub fn seal_checkpoint(key: &Key, cp: &Checkpoint) -> Result<String, serde_json::Error> {
    let mut text = serde_json::to_string(cp)?;
    let mac = key.mac(text.as_bytes());
    text.pop();
    text.push_str(MAC_FIELD);
    text.push_str(&mac);
    text.push_str("\"}");
    Ok(text)
}

/// Checks and parses a checkpoint's text.
pub fn unseal_checkpoint(key: &Key, text: &str) -> Result<Checkpoint, String> {
    let text = text.trim_end();
    let n = text.len();
    let split = n
        .checked_sub(MAC_SUFFIX_LEN)
        .filter(|s| text.is_char_boundary(*s) && text[*s..].starts_with(MAC_FIELD))
        .ok_or("not a sealed checkpoint")?;
    let body = format!("{}}}", &text[..split]);
    if key.mac(body.as_bytes()) != text[split + MAC_FIELD.len()..n - 2] {
        return Err("its MAC does not match: it was not written with this log's key".into());
    }
    serde_json::from_str(&body).map_err(|e| format!("not a checkpoint: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(seq: u64, prev: &str, detail: &str) -> Body {
        Body {
            seq,
            instance: "1-ab".into(),
            event: AuditEvent {
                detail: detail.into(),
                ts: 1,
                ..AuditEvent::now("s", "execute", "ok")
            },
            prev: prev.into(),
        }
    }

    fn chain(key: &Key, n: u64) -> Vec<String> {
        let mut prev = ZERO.to_string();
        let mut out = Vec::new();
        for seq in 1..=n {
            let (line, mac) = seal(key, &body(seq, &prev, &format!("r{seq}"))).unwrap();
            assert_eq!(unseal(key, line.as_bytes()).unwrap().1, mac);
            prev = mac;
            out.push(line);
        }
        out
    }

    fn joined(lines: &[String]) -> Vec<u8> {
        lines
            .iter()
            .flat_map(|l| format!("{l}\n").into_bytes())
            .collect()
    }

    #[test]
    fn a_sealed_chain_walks_clean_and_resumes() {
        let key = Key::generate();
        let lines = chain(&key, 5);
        let all = joined(&lines);
        let w = walk(&key, &all, Some(Pos::genesis()), 0);
        assert_eq!((w.lines, w.pos.seq, w.torn), (5, 5, 0));
        assert!(w.broken.is_none());
        // Resuming after the first two lines gives the same end.
        let head = joined(&lines[..2]);
        let w2 = walk(&key, &head, Some(Pos::genesis()), 0);
        let rest = walk(&key, &all[w2.consumed as usize..], Some(w2.pos), 2);
        assert_eq!(rest.pos, w.pos);
    }

    #[test]
    fn edits_removals_foreign_keys_and_torn_tails_are_found() {
        let key = Key::generate();
        let lines = chain(&key, 4);
        let edited: Vec<String> = lines
            .iter()
            .map(|l| l.replace("\"r2\"", "\"r9\""))
            .collect();
        let w = walk(&key, &joined(&edited), Some(Pos::genesis()), 0);
        assert_eq!(w.broken.as_ref().unwrap().line, 2);
        assert!(w.broken.unwrap().problem.contains("MAC"));

        let removed = [lines[0].clone(), lines[2].clone(), lines[3].clone()];
        let w = walk(&key, &joined(&removed), Some(Pos::genesis()), 0);
        assert_eq!(w.broken.as_ref().unwrap().line, 2);
        assert!(w.broken.unwrap().problem.contains("does not follow"));

        let other = Key::generate();
        let w = walk(&other, &joined(&lines), Some(Pos::genesis()), 0);
        assert_eq!(w.broken.unwrap().line, 1);

        let mut torn = joined(&lines);
        torn.extend_from_slice(b"{\"seq\":5,\"inst");
        let w = walk(&key, &torn, Some(Pos::genesis()), 0);
        assert_eq!((w.lines, w.torn), (4, 14));
        assert!(w.broken.is_none());
    }

    #[test]
    fn a_chain_restarts_only_at_a_break_record_opening_a_segment() {
        let key = Key::generate();
        let mut brk = body(7, ZERO, "set aside");
        brk.event.phase = "audit".into();
        brk.event.decision = "break".into();
        let (line, _) = seal(&key, &brk).unwrap();
        let w = walk(
            &key,
            format!("{line}\n").as_bytes(),
            Some(Pos::genesis()),
            0,
        );
        assert!(w.broken.is_none(), "{:?}", w.broken);
        assert_eq!(w.restarts.len(), 1);
        // The same record further down a segment is a broken chain.
        let w = walk(&key, format!("{line}\n").as_bytes(), Some(w.pos), 3);
        assert!(w.broken.is_some());
        // An ordinary record cannot restart a chain.
        let (plain, _) = seal(&key, &body(7, ZERO, "x")).unwrap();
        let start = Pos {
            seq: 6,
            tail: "ab".repeat(32),
        };
        let w = walk(&key, format!("{plain}\n").as_bytes(), Some(start), 0);
        assert!(w.broken.is_some());
    }

    #[test]
    fn checkpoints_are_signed() {
        let key = Key::generate();
        let cp = Checkpoint {
            segment: 3,
            offset: 1234,
            pos: Pos {
                seq: 99,
                tail: "cd".repeat(32),
            },
            sealed: vec![(1, 100), (2, 200)],
        };
        let text = seal_checkpoint(&key, &cp).unwrap();
        assert_eq!(unseal_checkpoint(&key, &text).unwrap(), cp);
        assert!(unseal_checkpoint(&key, &text.replace("1234", "1235")).is_err());
        assert!(unseal_checkpoint(&Key::generate(), &text).is_err());
        assert!(Key::from_hex(&key.to_hex()).is_some());
        assert!(Key::from_hex("xyz").is_none());
    }
}
