//! Large sources parsed on two threads at once. The source is cut at a
//! top-level statement boundary near its middle; each part is scanned and
//! parsed as a module of its own (ruff's parser keeps the offsets into the
//! whole source), the first on the caller's thread and the second on a
//! partner thread, which also frees that part's nodes once the check is done.
//! The walk then reads the two statement lists in order, exactly as it would
//! read the whole source's: nothing else changes.
//!
//! Why a cut gives the same tree. Python's tokenizer carries state from one
//! line to the next only through open brackets, open strings, a trailing
//! backslash and indentation. A first part that parses without errors ends
//! with no open bracket or string (either would be an error at its end); a
//! cut is only taken after a `\n` not preceded by a backslash, so no line is
//! continued across it; and the second part starts at column 0 with a letter,
//! `_` or `@`, so the whole source dedents there to the level a fresh module
//! starts at. The grammar carries nothing from one top-level statement to the
//! next except the clauses that continue a compound statement (`elif`, `else`,
//! `except`, `finally`: keywords, a syntax error at the start of a module, so
//! such a second part fails to parse; `case` clauses are indented and cannot
//! start at column 0). So when both parts parse, the joined list is the whole
//! source's (the tests compare the trees at every cut of many sources); when
//! either does not, the caller parses the whole source as before, and its
//! syntax errors are reported exactly as before.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, OnceLock};

use ruff_python_ast::Suite;
use ruff_python_parser::{Mode, ParseOptions};
use ruff_text_size::{TextRange, TextSize};

use super::depth::{self, DepthLimits};
use super::pool::{self, STACK_BYTES};

/// Sources shorter than this are parsed whole: handing half of a smaller one
/// to another thread (a wake-up) costs about what it saves.
pub const SPLIT_MIN_BYTES: usize = 64 * 1024;

/// A source's statements in two consecutive parts; walked in order they are
/// the whole source's statements.
#[derive(Debug)]
pub struct Parts {
    pub first: Suite,
    pub second: SecondPart,
}

/// The second part's statements. Parsed on the partner thread, they are
/// freed there too (when this is dropped): every node was allocated by that
/// thread, and freeing them from another thread would hand each one back
/// across cores (it made that thread's next parse markedly slower).
#[derive(Debug)]
pub struct SecondPart {
    stmts: Option<Suite>,
    parsed_by_partner: bool,
}

impl SecondPart {
    pub fn stmts(&self) -> &[ruff_python_ast::Stmt] {
        self.stmts.as_deref().unwrap_or_default()
    }
}

impl Drop for SecondPart {
    fn drop(&mut self) {
        if let Some(stmts) = self.stmts.take()
            && self.parsed_by_partner
            && let Some(partner) = partner()
        {
            // When the partner is gone the job comes back and drops here.
            let _ = partner.send(Box::new(move || drop(stmts)));
        }
    }
}

/// The statements of `text` as the parser gives them for the whole source,
/// parsed in two parts on two threads; `None` when `text` has no usable cut,
/// a part does not parse or needs more stack than the caller's (the small-stack
/// scan refuses it), or the partner thread is unavailable: the caller then
/// parses the whole source. The caller must have the room to parse inline
/// ([`super::pool::room_to_check_inline`]).
pub fn parse(text: &Arc<str>, limits: DepthLimits) -> Option<Parts> {
    let cut = cut_point(text)?;
    let partner = partner()?;
    // Whoever starts the second part first parses it: the partner, or this
    // thread once the first part is done, if the partner is busy with another
    // check's part and has not reached this one.
    let claimed = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    {
        let text = Arc::clone(text);
        let claimed = Arc::clone(&claimed);
        partner
            .send(Box::new(move || {
                if claimed.swap(true, Ordering::AcqRel) {
                    return;
                }
                let _ = tx.send(parse_part(&text, cut, text.len(), limits));
            }))
            .ok()?;
    }
    let Some(first) = parse_part(text, 0, cut, limits) else {
        // Nothing will use the second part: spare the partner.
        claimed.store(true, Ordering::Release);
        return None;
    };
    let second = if claimed.swap(true, Ordering::AcqRel) {
        SecondPart {
            stmts: Some(rx.recv().ok()??),
            parsed_by_partner: true,
        }
    } else {
        SecondPart {
            stmts: Some(parse_part(text, cut, text.len(), limits)?),
            parsed_by_partner: false,
        }
    };
    Some(Parts { first, second })
}

type Job = Box<dyn FnOnce() + Send + 'static>;

/// The partner thread's queue, started on first use (`None`: it could not
/// be started, and sources are parsed whole).
fn partner() -> Option<Sender<Job>> {
    static PARTNER: OnceLock<Option<Mutex<Sender<Job>>>> = OnceLock::new();
    let slot = PARTNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("warden-guard-part".into())
            .stack_size(STACK_BYTES)
            .spawn(move || {
                for job in rx {
                    // A parse that panics loses only its part: the check
                    // that waits for it parses the whole source instead.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                }
            })
            .ok()
            .map(|_| Mutex::new(tx))
    });
    slot.as_ref()?.lock().ok().map(|tx| tx.clone())
}

/// Whether a second thread can help at all.
pub fn worth_it() -> bool {
    // Read once: on Linux the answer comes from the cgroup files.
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get())) > 1
        && pool::room_to_check_inline()
}

/// `text[start..end]` parsed as a module of its own, with the offsets it has
/// in `text`; `None` when it fails the nesting scan or has a syntax error.
fn parse_part(text: &str, start: usize, end: usize, limits: DepthLimits) -> Option<Suite> {
    depth::scan(&text[start..end], limits).ok()?;
    let range = TextRange::new(offset(start)?, offset(end)?);
    let parsed =
        ruff_python_parser::parse_cells_unchecked(text, [range], &ParseOptions::from(Mode::Module));
    if !parsed.errors().is_empty() {
        return None;
    }
    Some(parsed.into_syntax().body)
}

fn offset(n: usize) -> Option<TextSize> {
    u32::try_from(n).ok().map(TextSize::from)
}

/// Where to cut `text`: the first usable boundary after its middle (up to
/// three quarters in), else the last one before it (down to a quarter in).
fn cut_point(text: &str) -> Option<usize> {
    let b = text.as_bytes();
    let (quarter, mid, three_quarters) = (b.len() / 4, b.len() / 2, b.len() / 4 * 3);
    memchr::memchr_iter(b'\n', &b[mid..three_quarters])
        .map(|i| mid + i + 1)
        .find(|&k| is_boundary(b, k))
        .or_else(|| {
            memchr::memrchr_iter(b'\n', &b[quarter..mid])
                .map(|i| quarter + i + 1)
                .find(|&k| is_boundary(b, k))
        })
}

/// Whether a cut before byte `k` can give two parts that parse as the whole
/// does (see the module docs): `k` starts a line, the line before does not
/// end in a backslash, and the line at `k` starts at column 0 with a letter,
/// `_` or `@` and is not a clause that continues a compound statement.
fn is_boundary(b: &[u8], k: usize) -> bool {
    if k < 2 || k >= b.len() || b[k - 1] != b'\n' {
        return false;
    }
    let mut end = k - 1;
    if b[end - 1] == b'\r' {
        end -= 1;
    }
    if end > 0 && b[end - 1] == b'\\' {
        return false;
    }
    let first = b[k];
    if !(first.is_ascii_alphabetic() || first == b'_' || first == b'@') {
        return false;
    }
    let rest = &b[k..];
    !["else", "elif", "except", "finally"].iter().any(|kw| {
        rest.starts_with(kw.as_bytes())
            && !rest
                .get(kw.len())
                .is_some_and(|&c| c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80)
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::guard::tests::corpus_texts;
    use proptest::prelude::*;

    const LIMITS: DepthLimits = depth::SMALL_STACK;

    fn whole(text: &str) -> Option<Suite> {
        ruff_python_parser::parse_module(text)
            .ok()
            .map(|p| p.into_syntax().body)
    }

    /// Every cut the splitter could take in `text`: where both parts parse,
    /// the joined statements are the whole source's, and the whole parses.
    /// Returns how many cuts both parts parsed at.
    fn every_cut_agrees(text: &str) -> usize {
        let b = text.as_bytes();
        let full = whole(text);
        let mut agreed = 0;
        for k in 1..b.len() {
            if !is_boundary(b, k) {
                continue;
            }
            let (Some(first), Some(second)) = (
                parse_part(text, 0, k, LIMITS),
                parse_part(text, k, b.len(), LIMITS),
            ) else {
                continue;
            };
            let mut joined = first;
            joined.extend(second);
            let full = full.as_ref().unwrap_or_else(|| {
                panic!("both parts parse at {k} but the whole does not:\n{text}")
            });
            assert!(
                &joined == full,
                "cut at {k} changes the tree:\n--- first part\n{}\n--- second part\n{}",
                &text[..k],
                &text[k..]
            );
            agreed += 1;
        }
        agreed
    }

    #[test]
    fn every_cut_of_the_corpora_gives_the_whole_tree() {
        let mut agreed = 0;
        for dir in [
            "tests/corpus/benign",
            "tests/corpus/redteam",
            "tests/corpus/bypass",
        ] {
            for text in corpus_texts(dir) {
                agreed += every_cut_agrees(&text);
            }
        }
        assert!(agreed > 400, "only {agreed} cuts were tried");
    }

    /// Shapes where a line at column 0 does not start a statement, or a
    /// statement continues past a line that does.
    const TRICKY: &[&str] = &[
        "x = 1\n",
        "s = \"\"\"\nabc = 1\n\"\"\"\n",
        "s = '''\n@dec\ndef f(): pass\n'''\n",
        "t = (1,\nx, 2)\n",
        "u = [\nfoo\n]\n",
        "v = {\nk: 1}\n",
        "w = 1 + \\\nz\n",
        "w2 = 1 + \\\r\nz\n",
        "# comment \\\nq = 2\n",
        "if a:\n    b = 1\nelse:\n    b = 2\n",
        "if a:\n    pass\nelif c:\n    pass\n",
        "try:\n    pass\nexcept E:\n    pass\nfinally:\n    pass\n",
        "for i in r:\n    pass\nelse:\n    pass\n",
        "while x:\n    break\nelse:\n    pass\n",
        "@dec\ndef f():\n    return 1\n",
        "@dec\n@dec2(x)\nclass C:\n    y = 1\n",
        "match p:\n    case 1:\n        pass\n    case _:\n        pass\n",
        "case = 1\n",
        "match = 2\n",
        "type X = int\n",
        "type = 3\n",
        "f = f\"{\nx\n}\"\n",
        "g = f'''\n{y}\nz'''\n",
        "b = b'\\\nq'\n",
        "lam = lambda: (\nx)\n",
        "class D:\n    def m(self):\n        pass\n\nn = 1\n",
        "x = 1 \\\n\n",
        "\x0cy = 1\n",
        "if x:\n    pass\n\x0celse:\n    pass\n",
        "a = 1; b = 2\n",
        "with open(p) as f:\n    pass\n",
        "async def h():\n    await x\n",
        "del_ = 1\nelse_ = 2\n",
        "print(1)\r\nprint(2)\r\n",
        "x = '''a\\\n'''\n",
        "def k():\n    '''doc\nnot_code = 1\n    '''\n",
    ];

    #[test]
    fn every_cut_of_the_tricky_shapes_gives_the_whole_tree() {
        // Each shape alone, each after and before a plain statement, and all
        // of them at once.
        for s in TRICKY {
            every_cut_agrees(s);
            every_cut_agrees(&format!("x0 = 0\n{s}"));
            every_cut_agrees(&format!("{s}y0 = 0\n"));
        }
        let all: String = TRICKY.concat();
        let all_ok = whole(&all).is_some();
        let n = every_cut_agrees(&all);
        // When the shapes parse together, cuts are found between them.
        assert!(!all_ok || n > 10, "{n} cuts");
    }

    #[test]
    fn a_cut_is_never_taken_inside_a_string_a_bracket_or_a_continued_line() {
        for (text, inside) in [
            ("s = \"\"\"\nabc = 1\n\"\"\"\n", "abc"),
            ("t = (1,\nx, 2)\n", "x, 2"),
            ("w = 1 + \\\nz\n", "z"),
            ("if a:\n    b = 1\nelse:\n    b = 2\n", "else"),
        ] {
            let k = text.find(inside).unwrap();
            let parts = (
                parse_part(text, 0, k, LIMITS),
                parse_part(text, k, text.len(), LIMITS),
            );
            assert!(
                !is_boundary(text.as_bytes(), k) || parts.0.is_none() || parts.1.is_none(),
                "{text:?} at {k}"
            );
        }
    }

    #[test]
    fn large_sources_are_parsed_in_two_parts_as_one() {
        let mut text = String::new();
        for t in corpus_texts("tests/corpus/benign") {
            text.push_str(&t);
        }
        while text.len() < 2 * SPLIT_MIN_BYTES {
            text = text.repeat(2);
        }
        let text: Arc<str> = text.into();
        let parts = parse(&text, LIMITS).expect("the corpus has a cut");
        let mut joined = parts.first.clone();
        joined.extend(parts.second.stmts().iter().cloned());
        assert!(Some(joined) == whole(&text));
        // Parts parsed by the partner are freed there: it keeps serving.
        drop(parts);
        assert!(parse(&text, LIMITS).is_some());
        // A syntax error in either half: no split, the caller parses the whole.
        let bad: Arc<str> = format!("{text}x = (\n").into();
        assert!(parse(&bad, LIMITS).is_none());
        let bad: Arc<str> = format!("x = )\n{text}").into();
        assert!(parse(&bad, LIMITS).is_none());
    }

    fn fragment() -> impl Strategy<Value = String> {
        prop::sample::select(TRICKY)
            .prop_map(str::to_string)
            .boxed()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn every_cut_of_random_sources_gives_the_whole_tree(
            parts in prop::collection::vec(
                prop_oneof![
                    fragment(),
                    "[a-z_]{1,3} = [0-9a-z'\"(\\[{}\\])\\\\ ]{0,6}\n",
                    "(    |\t)?[a-z#@'\"(){}\\[\\]:\\\\ ]{0,8}\r?\n",
                ],
                1..12,
            )
        ) {
            every_cut_agrees(&parts.concat());
        }
    }
}
