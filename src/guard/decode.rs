//! Source decoding exactly as CPython does it (PEP 263): an optional UTF-8
//! BOM, an optional coding cookie on line 1 or 2. The guard must read the same
//! characters the interpreter will run, so a cookie naming anything but UTF-8
//! (UTF-7, latin-1, ...) is refused rather than guessed at: under another
//! codec the bytes the guard checked could decode to different code.

use std::borrow::Cow;

/// Why the bytes were refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    pub message: String,
    /// 1-based line the problem is on.
    pub line: u32,
    /// 1-based column (in characters) the problem is at.
    pub col: u32,
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Decodes `source` as CPython would, or explains why not.
pub fn decode(source: &[u8]) -> Result<Cow<'_, str>, DecodeError> {
    let (body, had_bom) = match source.strip_prefix(BOM) {
        Some(rest) => (rest, true),
        None => (source, false),
    };
    if let Some((line, name)) = coding_cookie(body) {
        let line_no = u32::from(line) + 1;
        match classify(&name) {
            Codec::Utf8 => {}
            Codec::Ascii if !had_bom => {
                if let Some(pos) = body.iter().position(|b| !b.is_ascii()) {
                    let (l, c) = line_col(body, pos);
                    return Err(DecodeError {
                        message: format!(
                            "the coding cookie declares `{name}` but byte {pos} is not ASCII; \
                             send the code as UTF-8 (and drop the cookie)"
                        ),
                        line: l,
                        col: c,
                    });
                }
            }
            _ if had_bom => {
                return Err(DecodeError {
                    message: format!(
                        "encoding problem: `{name}` with a UTF-8 BOM; remove the cookie or the BOM"
                    ),
                    line: line_no,
                    col: 1,
                });
            }
            _ => {
                return Err(DecodeError {
                    message: format!(
                        "the coding cookie declares `{name}`; only UTF-8 source is accepted: \
                         re-encode the code as UTF-8 and remove the cookie"
                    ),
                    line: line_no,
                    col: 1,
                });
            }
        }
    }
    match std::str::from_utf8(body) {
        Ok(text) => Ok(Cow::Borrowed(text)),
        Err(e) => {
            let (line, col) = line_col(body, e.valid_up_to());
            Err(DecodeError {
                message: format!(
                    "invalid UTF-8 at byte {}; send the code as UTF-8 text",
                    e.valid_up_to() + if had_bom { BOM.len() } else { 0 }
                ),
                line,
                col,
            })
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Codec {
    Utf8,
    Ascii,
    Other,
}

/// Maps a cookie name to the codec CPython would pick (its `get_normal_name`
/// plus the codec registry's aliases for UTF-8 and ASCII).
fn classify(name: &str) -> Codec {
    let n: String = name
        .chars()
        .map(|c| {
            if c == '_' {
                '-'
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect();
    if n == "utf-8" || n.starts_with("utf-8-") {
        return Codec::Utf8;
    }
    match n.as_str() {
        "utf8" | "u8" | "utf" | "cp65001" | "utf8-ucs2" | "utf8-ucs4" => Codec::Utf8,
        "ascii" | "us-ascii" | "646" | "us" | "iso646-us" | "ansi-x3.4-1968" => Codec::Ascii,
        _ => Codec::Other,
    }
}

/// The cookie name and its 0-based line, from line 1, or from line 2 when
/// line 1 is blank or a comment (as `tokenize.detect_encoding` does).
fn coding_cookie(body: &[u8]) -> Option<(u8, String)> {
    let mut lines = body.split(|&b| b == b'\n');
    let first = lines.next()?;
    if let Some(name) = cookie_in_line(first) {
        return Some((0, name));
    }
    if !blank_or_comment(first) {
        return None;
    }
    let second = lines.next()?;
    cookie_in_line(second).map(|n| (1, n))
}

fn blank_or_comment(line: &[u8]) -> bool {
    match line.iter().find(|b| !matches!(b, b' ' | b'\t' | b'\x0c')) {
        None => true,
        Some(b) => matches!(b, b'#' | b'\r' | b'\n'),
    }
}

/// `^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)` without a regex engine.
fn cookie_in_line(line: &[u8]) -> Option<String> {
    let start = line
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t' | b'\x0c'))?;
    if line[start] != b'#' {
        return None;
    }
    let rest = &line[start + 1..];
    let mut from = 0;
    while let Some(off) = find(&rest[from..], b"coding") {
        let after = from + off + b"coding".len();
        from = from + off + 1;
        if !matches!(rest.get(after), Some(b':' | b'=')) {
            continue;
        }
        let mut i = after + 1;
        while matches!(rest.get(i), Some(b' ' | b'\t')) {
            i += 1;
        }
        let name_end = rest[i..]
            .iter()
            .position(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')))
            .map_or(rest.len(), |p| i + p);
        if name_end > i {
            return Some(String::from_utf8_lossy(&rest[i..name_end]).into_owned());
        }
    }
    None
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// 1-based line and character column of byte `pos` (bytes before it are valid UTF-8).
fn line_col(body: &[u8], pos: usize) -> (u32, u32) {
    let before = &body[..pos.min(body.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |p| p + 1);
    let col = String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count()
        + 1;
    (
        u32::try_from(line).unwrap_or(u32::MAX),
        u32::try_from(col).unwrap_or(u32::MAX),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn plain_utf8_is_borrowed() {
        assert!(matches!(
            decode(b"print(1)\n"),
            Ok(Cow::Borrowed("print(1)\n"))
        ));
    }

    #[test]
    fn bom_is_stripped() {
        assert_eq!(decode(b"\xEF\xBB\xBFx = 1\n").unwrap(), "x = 1\n");
    }

    #[test]
    fn utf8_cookies_and_aliases_are_accepted() {
        for cookie in [
            "# -*- coding: utf-8 -*-",
            "# coding=utf8",
            "# vim: set fileencoding=UTF_8 :",
            "# coding: utf-8-sig",
            "# coding: u8",
        ] {
            let src = format!("{cookie}\nx = 'é'\n");
            assert!(decode(src.as_bytes()).is_ok(), "{cookie}");
        }
        assert!(decode(b"#!/usr/bin/env python\n# coding: utf-8\nx=1\n").is_ok());
    }

    #[test]
    fn other_codecs_are_refused_with_the_line() {
        let e = decode(b"# coding: utf-7\nx = 1\n").unwrap_err();
        assert!(e.message.contains("utf-7"));
        assert_eq!(e.line, 1);
        let e = decode(b"\n# -*- coding: latin-1 -*-\nx = 1\n").unwrap_err();
        assert_eq!(e.line, 2);
        let e = decode(b"\xEF\xBB\xBF# coding: latin-1\n").unwrap_err();
        assert!(e.message.contains("BOM"));
    }

    #[test]
    fn cookie_on_line_two_only_after_a_comment_or_blank_line() {
        // Line 1 is code, so CPython ignores the cookie on line 2.
        assert!(decode(b"x = 1\n# coding: latin-1\n").is_ok());
        assert!(decode(b"  # c\n# coding: latin-1\n").is_err());
        // Line 3 is never consulted.
        assert!(decode(b"#\n#\n# coding: latin-1\n").is_ok());
    }

    #[test]
    fn ascii_cookie_needs_ascii_bytes() {
        assert!(decode(b"# coding: ascii\nx = 1\n").is_ok());
        let e = decode("# coding: ascii\nx = 'é'\n".as_bytes()).unwrap_err();
        assert_eq!(e.line, 2);
    }

    #[test]
    fn invalid_utf8_is_refused_with_position() {
        let e = decode(b"x = 1\ny = '\xff'\n").unwrap_err();
        assert_eq!((e.line, e.col), (2, 6));
        assert!(e.message.contains("UTF-8"));
    }

    #[test]
    fn cookie_scan_takes_the_first_named_match() {
        assert_eq!(
            cookie_in_line(b"# coding: \tlatin-1 x").as_deref(),
            Some("latin-1")
        );
        assert_eq!(
            cookie_in_line(b"# coding: # coding=ascii").as_deref(),
            Some("ascii")
        );
        assert_eq!(cookie_in_line(b"x = 1 # coding: latin-1"), None);
        assert_eq!(cookie_in_line(b"# encoding"), None);
    }
}
