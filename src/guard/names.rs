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
}
