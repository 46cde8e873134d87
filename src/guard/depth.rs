//! Pre-parse nesting scan. The parser builds a tree whose depth follows the
//! input, and dropping or walking a deep tree recurses; hostile input such as
//! 100,000 nested parentheses or `1+1+1+...` must be refused *before* it is
//! parsed. This scanner understands just enough Python lexing (strings,
//! f-string braces, comments, continuations, indentation) to bound:
//!
//! * bracket depth (f-string replacement braces included),
//! * indentation depth,
//! * the "chain" estimate: how many nested nodes one expression can build
//!   from operators, attribute dots, call/subscript trailers, prefix keywords
//!   (`not`, `lambda`, `await`, `if`/`else`) and `elif` ladders.
//!
//! The estimate deliberately over-counts (every operator character counts);
//! it only has to be an upper bound on tree depth that ordinary code stays
//! far below.

/// Why the code was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DepthError {
    pub message: String,
    /// Byte offset where the limit was crossed.
    pub offset: usize,
}

/// Limits for [`scan`].
#[derive(Debug, Clone, Copy)]
pub struct DepthLimits {
    pub max_nesting: usize,
    pub max_chain: usize,
}

/// One open bracket level.
struct Level {
    /// Chain count inherited from the enclosing level when it opened.
    base: usize,
    /// Chain count so far in the current comma-separated element.
    chain: usize,
}

/// Limits under which parsing and walking stay shallow enough for the
/// caller's own stack (a 2 MiB thread): the guard then checks inline instead
/// of handing the source to a parse thread and waiting for it to be
/// scheduled. Ordinary code stays far below them; `guard::tests` checks the
/// deepest shapes they admit on a 512 KiB stack in a debug build (measured:
/// more than 128 KiB, less than 256 KiB).
pub const SMALL_STACK: DepthLimits = DepthLimits {
    max_nesting: 24,
    max_chain: 128,
};

/// [`SMALL_STACK`], never above the policy's own limits.
pub fn small_stack_limits(policy: DepthLimits) -> DepthLimits {
    DepthLimits {
        max_nesting: policy.max_nesting.min(SMALL_STACK.max_nesting),
        max_chain: policy.max_chain.min(SMALL_STACK.max_chain),
    }
}

const KEYWORDS_THAT_NEST: &[&str] = &["lambda", "not", "await", "if", "else", "yield"];

/// Scans `src`; `Ok(())` means parsing and walking it stays within bounded depth.
pub fn scan(src: &str, limits: DepthLimits) -> Result<(), DepthError> {
    Scanner {
        src: src.as_bytes(),
        pos: 0,
        limits,
        levels: vec![Level { base: 0, chain: 0 }],
        keywords: 0,
        indents: vec![0],
        elifs: vec![0],
        elif_sum: 0,
        at_line_start: true,
    }
    .run()
}

struct Scanner<'a> {
    src: &'a [u8],
    pos: usize,
    limits: DepthLimits,
    levels: Vec<Level>,
    /// Nesting keywords seen in the current logical line.
    keywords: usize,
    /// Indentation widths of the open blocks.
    indents: Vec<usize>,
    /// Length of the `elif` ladder at each open indentation level.
    elifs: Vec<usize>,
    /// The sum of `elifs`, kept as they change (`bump` reads it at every
    /// operator).
    elif_sum: usize,
    at_line_start: bool,
}

impl Scanner<'_> {
    fn run(mut self) -> Result<(), DepthError> {
        while self.pos < self.src.len() {
            if self.at_line_start && self.levels.len() == 1 {
                self.at_line_start = false;
                self.line_start()?;
                continue;
            }
            let b = self.src[self.pos];
            match b {
                b'#' => self.skip_comment(),
                b'\\' => {
                    // Explicit line continuation: the logical line goes on.
                    self.pos += 1;
                    if self.src.get(self.pos) == Some(&b'\r') {
                        self.pos += 1;
                    }
                    if self.src.get(self.pos) == Some(&b'\n') {
                        self.pos += 1;
                    }
                }
                b'\n' | b'\r' => {
                    self.pos += 1;
                    if self.levels.len() == 1 {
                        self.end_logical_line();
                    }
                }
                b'(' | b'[' | b'{' => {
                    self.pos += 1;
                    self.open()?;
                }
                b')' | b']' | b'}' => {
                    self.pos += 1;
                    self.close();
                }
                b',' => {
                    self.pos += 1;
                    let top = self.top();
                    top.chain = top.base;
                }
                b';' => {
                    self.pos += 1;
                    if self.levels.len() == 1 {
                        self.keywords = 0;
                        let top = self.top();
                        top.chain = 0;
                    }
                }
                b'\'' | b'"' => self.string(0)?,
                b'0'..=b'9' => self.number(),
                b'.' if self.src.get(self.pos + 1).is_some_and(u8::is_ascii_digit) => self.number(),
                b'+' | b'-' | b'*' | b'/' | b'%' | b'@' | b'&' | b'|' | b'^' | b'~' | b'<'
                | b'>' | b'=' | b'!' | b'.' | b':' => {
                    self.pos += 1;
                    self.bump(1)?;
                }
                _ if b == b'_' || b.is_ascii_alphabetic() || b >= 0x80 => self.word()?,
                _ => self.pos += 1,
            }
        }
        Ok(())
    }

    fn top(&mut self) -> &mut Level {
        let last = self.levels.len() - 1;
        &mut self.levels[last]
    }

    fn err(&self, message: String) -> DepthError {
        DepthError {
            message,
            offset: self.pos.min(self.src.len()),
        }
    }

    fn bump(&mut self, n: usize) -> Result<(), DepthError> {
        let top = self.top();
        top.chain += n;
        let chain = top.chain;
        if chain + self.keywords + self.elif_sum > self.limits.max_chain {
            return Err(self.err(format!(
                "this expression nests more than {} operators, calls, attribute accesses or \
                 `elif` branches deep; split it into smaller statements",
                self.limits.max_chain
            )));
        }
        Ok(())
    }

    fn open(&mut self) -> Result<(), DepthError> {
        self.bump(1)?;
        let inherited = self.top().chain;
        self.levels.push(Level {
            base: inherited,
            chain: inherited,
        });
        if self.levels.len() - 1 > self.limits.max_nesting {
            return Err(self.err(format!(
                "brackets are nested more than {} levels deep; flatten the expression",
                self.limits.max_nesting
            )));
        }
        Ok(())
    }

    fn close(&mut self) {
        if self.levels.len() > 1 {
            self.levels.pop();
        }
    }

    fn end_logical_line(&mut self) {
        self.keywords = 0;
        self.top().chain = 0;
        self.at_line_start = true;
    }

    /// Measures indentation at the start of a line outside brackets.
    fn line_start(&mut self) -> Result<(), DepthError> {
        let mut width = 0usize;
        while let Some(&b) = self.src.get(self.pos) {
            match b {
                b' ' => width += 1,
                b'\t' => width = (width / 8 + 1) * 8,
                b'\x0c' => width = 0,
                _ => break,
            }
            self.pos += 1;
        }
        match self.src.get(self.pos) {
            // Blank and comment-only lines do not change indentation.
            None | Some(b'\n' | b'\r' | b'#') => {
                self.at_line_start = !matches!(self.src.get(self.pos), Some(b'#'));
                if let Some(b'\n' | b'\r') = self.src.get(self.pos) {
                    self.pos += 1;
                    self.at_line_start = true;
                }
                return Ok(());
            }
            Some(b'\\') => return Ok(()),
            _ => {}
        }
        let current = self.indents.last().copied().unwrap_or(0);
        if width > current {
            self.indents.push(width);
            self.elifs.push(0);
            if self.indents.len() - 1 > self.limits.max_nesting {
                return Err(self.err(format!(
                    "blocks are indented more than {} levels deep; move inner blocks into functions",
                    self.limits.max_nesting
                )));
            }
        } else {
            while self.indents.len() > 1 && self.indents.last().is_some_and(|&w| w > width) {
                self.indents.pop();
                self.elif_sum -= self.elifs.pop().unwrap_or(0);
            }
        }
        // An `elif` ladder nests each branch inside the previous `else`.
        let (elif, else_) = match self.peek_word() {
            b"elif" => (true, false),
            b"else" => (false, true),
            _ => (false, false),
        };
        if let Some(last) = self.elifs.last_mut() {
            if elif {
                *last += 1;
                self.elif_sum += 1;
            } else if !else_ {
                self.elif_sum -= *last;
                *last = 0;
            }
        }
        if elif {
            self.bump(0)?;
        }
        Ok(())
    }

    fn peek_word(&self) -> &[u8] {
        let rest = &self.src[self.pos..];
        let end = rest
            .iter()
            .position(|b| !(b.is_ascii_alphanumeric() || *b == b'_'))
            .unwrap_or(rest.len());
        &rest[..end]
    }

    fn skip_comment(&mut self) {
        let rest = &self.src[self.pos..];
        self.pos += memchr::memchr2(b'\n', b'\r', rest).unwrap_or(rest.len());
    }

    fn number(&mut self) {
        while let Some(&b) = self.src.get(self.pos) {
            let exponent_sign = (b == b'+' || b == b'-')
                && matches!(self.src.get(self.pos.wrapping_sub(1)), Some(b'e' | b'E'));
            if b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || exponent_sign {
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    fn word(&mut self) -> Result<(), DepthError> {
        let start = self.pos;
        while let Some(&b) = self.src.get(self.pos) {
            if b == b'_' || b.is_ascii_alphanumeric() || b >= 0x80 {
                self.pos += 1;
            } else {
                break;
            }
        }
        let word = &self.src[start..self.pos];
        if let Some(b'\'' | b'"') = self.src.get(self.pos)
            && word.len() <= 3
            && word.iter().all(|b| b"rRbBuUfF".contains(b))
        {
            let fstring = word.iter().any(|b| *b == b'f' || *b == b'F');
            return self.string(if fstring { 1 } else { 0 });
        }
        if (2..=6).contains(&word.len()) && KEYWORDS_THAT_NEST.iter().any(|k| k.as_bytes() == word)
        {
            self.keywords += 1;
            self.bump(0)?;
        }
        Ok(())
    }

    /// Skips a string literal starting at the quote under `pos`. In f-strings
    /// (`kind == 1`) replacement-field braces count as nesting and the
    /// operators inside them as chain.
    fn string(&mut self, kind: u8) -> Result<(), DepthError> {
        let quote = self.src[self.pos];
        let triple = self.src.get(self.pos + 1) == Some(&quote)
            && self.src.get(self.pos + 2) == Some(&quote);
        self.pos += if triple { 3 } else { 1 };
        let fstring = kind == 1;
        let outer_levels = self.levels.len();
        while let Some(&b) = self.src.get(self.pos) {
            // Outside f-strings only the quote, a backslash and a line end
            // mean anything: skip to the next of them at once.
            if !fstring && b != quote && b != b'\\' && b != b'\n' {
                let rest = &self.src[self.pos..];
                match memchr::memchr3(quote, b'\\', b'\n', rest) {
                    Some(i) => self.pos += i,
                    None => self.pos = self.src.len(),
                }
                continue;
            }
            match b {
                b'\\' => self.pos += 2,
                _ if b == quote => {
                    if !triple {
                        self.pos += 1;
                        break;
                    }
                    if self.src.get(self.pos + 1) == Some(&quote)
                        && self.src.get(self.pos + 2) == Some(&quote)
                    {
                        self.pos += 3;
                        break;
                    }
                    self.pos += 1;
                }
                b'\n' if !triple => break,
                b'{' if fstring => {
                    if self.levels.len() == outer_levels
                        && self.src.get(self.pos + 1) == Some(&b'{')
                    {
                        self.pos += 2;
                    } else {
                        self.pos += 1;
                        self.open()?;
                    }
                }
                b'}' if fstring => {
                    if self.levels.len() > outer_levels {
                        self.levels.pop();
                    }
                    self.pos += 1;
                }
                b'(' | b'[' if fstring && self.levels.len() > outer_levels => {
                    self.pos += 1;
                    self.open()?;
                }
                b')' | b']' if fstring && self.levels.len() > outer_levels => {
                    self.pos += 1;
                    self.close();
                }
                b'+' | b'-' | b'*' | b'/' | b'%' | b'@' | b'&' | b'|' | b'^' | b'~' | b'<'
                | b'>' | b'=' | b'!' | b'.' | b':'
                    if fstring && self.levels.len() > outer_levels =>
                {
                    self.pos += 1;
                    self.bump(1)?;
                }
                _ => self.pos += 1,
            }
        }
        while self.levels.len() > outer_levels {
            self.levels.pop();
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const LIMITS: DepthLimits = DepthLimits {
        max_nesting: 100,
        max_chain: 1000,
    };

    fn ok(src: &str) -> bool {
        scan(src, LIMITS).is_ok()
    }

    #[test]
    fn ordinary_code_passes() {
        assert!(ok("x = [1, 2, 3]\nif x:\n    print(x)\n"));
        assert!(ok(&format!("x = [{}]\n", "1, ".repeat(50_000))));
        assert!(ok(&"a = b + c * d\n".repeat(5_000)));
        assert!(ok("s = f'{x:{width}.{prec}}'\n"));
        assert!(ok(&format!("x = '{}'\n", "(".repeat(10_000))));
        assert!(ok(&format!("# {}\nx = 1\n", "[".repeat(10_000))));
        assert!(ok(&format!("x = '''{}'''\n", "\n(((".repeat(1_000))));
    }

    #[test]
    fn deep_brackets_are_refused() {
        let e = scan(
            &format!("x = {}1{}", "(".repeat(100_000), ")".repeat(100_000)),
            LIMITS,
        )
        .unwrap_err();
        assert!(e.message.contains("brackets"));
        assert!(!ok(&format!("x = {}1{}", "[".repeat(101), "]".repeat(101))));
        assert!(ok(&format!("x = {}1{}", "[".repeat(99), "]".repeat(99))));
    }

    #[test]
    fn deep_chains_are_refused() {
        assert!(!ok(&format!("x = 1{}\n", "+1".repeat(100_000))));
        assert!(!ok(&format!("x = a{}\n", ".b".repeat(100_000))));
        assert!(!ok(&format!("x = f{}\n", "()".repeat(100_000))));
        assert!(!ok(&format!("x = {}1\n", "-".repeat(100_000))));
        assert!(!ok(&format!("x = {}1\n", "not ".repeat(100_000))));
        assert!(!ok(&format!("x = {}1\n", "lambda: ".repeat(100_000))));
        assert!(!ok(&format!("f = {}0\n", "lambda a, b=".repeat(5_000))));
        assert!(!ok(&format!(
            "x = {}\n",
            "1 if c else ".repeat(5_000) + "0"
        )));
        // Chains hidden in f-string replacement fields count too.
        assert!(!ok(&format!("x = f'{{{}}}'\n", "1+".repeat(5_000) + "1")));
        assert!(!ok(&format!(
            "x = f'{}'\n",
            "{x:".repeat(200) + &"}".repeat(200)
        )));
    }

    #[test]
    fn elif_ladders_and_indentation_are_bounded() {
        let mut ladder = String::from("if x == 0:\n    pass\n");
        for i in 1..5_000 {
            ladder.push_str(&format!("elif x == {i}:\n    pass\n"));
        }
        assert!(!ok(&ladder));
        let mut deep = String::new();
        for i in 0..150 {
            deep.push_str(&" ".repeat(i));
            deep.push_str("if x:\n");
        }
        assert!(!ok(&deep));
        // Many short ladders one after another are fine.
        assert!(ok(
            &"if a:\n    pass\nelif b:\n    pass\nelse:\n    pass\n".repeat(2_000)
        ));
    }

    #[test]
    fn commas_and_newlines_reset_the_chain() {
        assert!(ok(&format!("x = [{}]\n", "a.b.c + 1, ".repeat(10_000))));
        assert!(ok(&"x = a + b + c + d + e\n".repeat(10_000)));
    }
}
