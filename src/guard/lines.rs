//! Byte offsets to human positions. The parser reports byte offsets into the
//! decoded source; findings carry a 1-based line, a 1-based column counted
//! in characters (what an editor shows), and the source line as a snippet.

/// Line starts of one source text.
pub struct LineIndex<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

const SNIPPET_CHARS: usize = 160;

impl<'a> LineIndex<'a> {
    /// Indexes `text`; `\n`, `\r\n` and a lone `\r` all end a line, as in CPython.
    pub fn new(text: &'a str) -> Self {
        let bytes = text.as_bytes();
        let mut starts = vec![0];
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'\n' => starts.push(i + 1),
                b'\r' => {
                    if bytes.get(i + 1) == Some(&b'\n') {
                        i += 1;
                    }
                    starts.push(i + 1);
                }
                _ => {}
            }
            i += 1;
        }
        LineIndex { text, starts }
    }

    /// 1-based (line, column) of a byte offset; offsets past the end clamp.
    pub fn position(&self, offset: usize) -> (u32, u32) {
        let offset = offset.min(self.text.len());
        let line = self.starts.partition_point(|&s| s <= offset).max(1) - 1;
        let start = self.starts[line];
        let col = self
            .text
            .get(start..offset)
            .map_or(offset - start, |s| s.chars().count());
        (to_u32(line + 1), to_u32(col + 1))
    }

    /// The text of a 1-based line, trimmed and shortened for display.
    pub fn snippet(&self, line: u32) -> String {
        let idx = (line as usize).saturating_sub(1);
        let Some(&start) = self.starts.get(idx) else {
            return String::new();
        };
        let end = self.starts.get(idx + 1).copied().unwrap_or(self.text.len());
        let raw = self.text.get(start..end).unwrap_or("");
        let trimmed = raw.trim_end_matches(['\n', '\r']).trim();
        if trimmed.chars().count() > SNIPPET_CHARS {
            let mut s: String = trimmed.chars().take(SNIPPET_CHARS).collect();
            s.push('…');
            s
        } else {
            trimmed.to_string()
        }
    }
}

fn to_u32(v: usize) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_one_based_and_count_characters() {
        let idx = LineIndex::new("ab\néx = 1\r\nz\rq");
        assert_eq!(idx.position(0), (1, 1));
        assert_eq!(idx.position(3), (2, 1));
        assert_eq!(idx.position(5), (2, 2)); // after the 2-byte é
        assert_eq!(idx.position(12), (3, 1));
        assert_eq!(idx.position(14), (4, 1));
        assert_eq!(idx.position(999), (4, 2));
        assert_eq!(idx.snippet(2), "éx = 1");
        assert_eq!(idx.snippet(9), "");
    }

    #[test]
    fn offsets_inside_a_character_do_not_panic() {
        let idx = LineIndex::new("é");
        let _ = idx.position(1);
        assert_eq!(LineIndex::new("").position(0), (1, 1));
    }

    #[test]
    fn long_lines_are_shortened() {
        let long = "x".repeat(500);
        let idx = LineIndex::new(&long);
        assert!(idx.snippet(1).chars().count() <= SNIPPET_CHARS + 1);
    }
}
