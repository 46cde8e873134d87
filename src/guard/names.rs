//! Identifier normalisation. CPython folds every identifier to Unicode NFKC
//! while parsing (`ｅｘｅｃ` *is* `exec`), so every name the guard compares
//! goes through [`nfkc`] first.

use std::borrow::Cow;

use unicode_normalization::UnicodeNormalization;

/// The NFKC form of `name`; ASCII (nearly every identifier) is returned as is.
pub fn nfkc(name: &str) -> Cow<'_, str> {
    if name.is_ascii() {
        Cow::Borrowed(name)
    } else {
        Cow::Owned(name.nfkc().collect())
    }
}

/// Whether the NFKC form of `s` is the ASCII name `target`, without
/// normalising long strings: NFKC never joins characters into ASCII ones
/// (canonical composition only yields non-ASCII characters), so a string
/// whose form is `target` has at most `target.len()` characters, of at
/// most 4 bytes each.
pub fn nfkc_is(s: &str, target: &str) -> bool {
    if s.is_ascii() {
        return s == target;
    }
    // Compared as the normalised characters come: no string is built, and
    // most strings differ from the name at their first character.
    s.len() <= 4 * target.len() && s.nfkc().eq(target.chars())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn fullwidth_and_ligatures_fold_like_cpython() {
        assert_eq!(nfkc("ｅｘｅｃ"), "exec");
        assert_eq!(nfkc("ﬁle"), "file");
        assert_eq!(nfkc("𝐞𝐯𝐚𝐥"), "eval");
        assert!(matches!(nfkc("plain"), Cow::Borrowed(_)));
    }

    #[test]
    fn nfkc_is_matches_every_spelling_and_nothing_longer() {
        assert!(nfkc_is("__match_args__", "__match_args__"));
        assert!(nfkc_is("__ｍａｔｃｈ_args__", "__match_args__"));
        assert!(nfkc_is("＿＿𝐦𝐚𝐭𝐜𝐡＿ａｒｇｓ＿＿", "__match_args__"));
        assert!(!nfkc_is("__match_args__ ", "__match_args__"));
        assert!(!nfkc_is(&"é".repeat(100), "__match_args__"));
    }
}
