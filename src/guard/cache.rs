//! The verdict cache: the guard off the critical path.
//!
//! An agent sends the same cell again and again (a retry, a re-run after a
//! fix elsewhere, a notebook re-executed from the top). A verdict depends
//! only on the source bytes, the policy and the roots the code may name (the
//! workspace and the user's grants), so it is cached under exactly that key:
//! a hit costs one hash of the source and one comparison, never a parse.
//!
//! The key is a keyed SipHash (a random key per cache, so nobody can aim a
//! collision at it), and a hit is only taken after the stored source,
//! policy digest and roots compare equal byte for byte: a collision is a
//! miss, never someone else's verdict. The cache is bounded in entries and
//! in source bytes and evicts the least recently used entry.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::path::PathBuf;
use std::sync::Mutex;

use super::{CheckContext, Guard, Leftovers, Verdict};

/// Entries kept at most.
pub const MAX_ENTRIES: usize = 1024;
/// Source bytes kept at most, over all entries.
pub const MAX_BYTES: usize = 64 << 20;

/// A bounded, thread-safe map from (source, policy, roots) to verdict.
#[derive(Debug)]
pub struct VerdictCache {
    hasher: RandomState,
    inner: Mutex<Inner>,
    max_entries: usize,
    max_bytes: usize,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<u64, Entry>,
    bytes: usize,
    clock: u64,
    hits: u64,
    misses: u64,
}

#[derive(Debug)]
struct Entry {
    source: Box<[u8]>,
    policy: [u8; 32],
    workspace: PathBuf,
    roots: Vec<PathBuf>,
    verdict: Verdict,
    used: u64,
}

/// Where a source's verdict is filed: what [`VerdictCache::get`] hands back
/// on a miss, for the [`VerdictCache::insert`] that follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key(u64);

/// How the cache has done so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    pub entries: usize,
    pub bytes: usize,
    pub hits: u64,
    pub misses: u64,
}

impl Default for VerdictCache {
    fn default() -> Self {
        VerdictCache::new(MAX_ENTRIES, MAX_BYTES)
    }
}

impl VerdictCache {
    /// A cache holding at most `max_entries` verdicts and `max_bytes` of source.
    pub fn new(max_entries: usize, max_bytes: usize) -> VerdictCache {
        VerdictCache {
            hasher: RandomState::new(),
            inner: Mutex::new(Inner::default()),
            max_entries: max_entries.max(1),
            max_bytes,
        }
    }

    /// The guard's verdict on `source`, from the cache when this exact
    /// source was checked before under the same policy and roots.
    pub fn check(&self, guard: &Guard, source: &[u8], ctx: &CheckContext) -> Verdict {
        match self.get(guard, source, ctx) {
            Ok(v) => v,
            Err(key) => {
                let verdict = guard.check(source, ctx);
                self.insert(key, guard, source.into(), ctx, &verdict);
                verdict
            }
        }
    }

    /// [`check`](Self::check), with a miss's syntax tree handed back
    /// unfreed (see [`Guard::check_deferring_free`]).
    pub fn check_deferring_free(
        &self,
        guard: &Guard,
        source: &[u8],
        ctx: &CheckContext,
    ) -> (Verdict, Leftovers) {
        match self.get(guard, source, ctx) {
            Ok(v) => (v, Leftovers::default()),
            Err(key) => {
                let (verdict, left) = guard.check_deferring_free(source, ctx);
                self.insert(key, guard, source.into(), ctx, &verdict);
                (verdict, left)
            }
        }
    }

    /// A cached verdict, or on a miss the key to [`insert`](Self::insert)
    /// the verdict under: the source is hashed once per check, and 29 KB of
    /// source cost about as much to hash as the rest of a hit.
    pub fn get(&self, guard: &Guard, source: &[u8], ctx: &CheckContext) -> Result<Verdict, Key> {
        let key = Key(self.key(guard, source, ctx));
        let Ok(mut inner) = self.inner.lock() else {
            return Err(key);
        };
        inner.clock += 1;
        let now = inner.clock;
        let hit = match inner.entries.get_mut(&key.0) {
            Some(e) if e.matches(guard, source, ctx) => {
                e.used = now;
                Some(e.verdict.clone())
            }
            _ => None,
        };
        match hit {
            Some(v) => {
                inner.hits += 1;
                Ok(v)
            }
            None => {
                inner.misses += 1;
                Err(key)
            }
        }
    }

    /// Remembers `verdict` for `source` (moved in, not copied) under the
    /// `key` that [`get`](Self::get) returned for it. A key from another
    /// source only files the entry where no lookup of this source looks:
    /// a hit still needs the stored source, policy and roots to compare
    /// equal. Verdicts that say the guard itself failed are not kept: the
    /// next call should try again.
    pub fn insert(
        &self,
        key: Key,
        guard: &Guard,
        source: Box<[u8]>,
        ctx: &CheckContext,
        verdict: &Verdict,
    ) {
        if verdict.findings.iter().any(|f| f.rule == "internal_error")
            || source.len() > self.max_bytes
        {
            return;
        }
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        inner.clock += 1;
        let len = source.len();
        let entry = Entry {
            source,
            policy: guard.policy_digest(),
            workspace: ctx.workspace.clone(),
            roots: ctx.allowed_roots.clone(),
            verdict: verdict.clone(),
            used: inner.clock,
        };
        inner.bytes += len;
        if let Some(old) = inner.entries.insert(key.0, entry) {
            inner.bytes -= old.source.len();
        }
        while inner.entries.len() > self.max_entries || inner.bytes > self.max_bytes {
            if !inner.evict_oldest() {
                break;
            }
        }
    }

    /// Counters for benchmarks and diagnostics.
    pub fn stats(&self) -> CacheStats {
        self.inner.lock().map_or(
            CacheStats {
                entries: 0,
                bytes: 0,
                hits: 0,
                misses: 0,
            },
            |i| CacheStats {
                entries: i.entries.len(),
                bytes: i.bytes,
                hits: i.hits,
                misses: i.misses,
            },
        )
    }

    fn key(&self, guard: &Guard, source: &[u8], ctx: &CheckContext) -> u64 {
        let mut h = self.hasher.build_hasher();
        h.write(&guard.policy_digest());
        h.write(ctx.workspace.as_os_str().as_encoded_bytes());
        h.write_u8(0);
        for root in &ctx.allowed_roots {
            h.write(root.as_os_str().as_encoded_bytes());
            h.write_u8(0);
        }
        h.write_usize(ctx.allowed_roots.len());
        h.write(source);
        h.finish()
    }
}

impl Entry {
    fn matches(&self, guard: &Guard, source: &[u8], ctx: &CheckContext) -> bool {
        self.policy == guard.policy_digest()
            && *self.source == *source
            && self.workspace == ctx.workspace
            && self.roots == ctx.allowed_roots
    }
}

impl Inner {
    fn evict_oldest(&mut self) -> bool {
        let Some(oldest) = self
            .entries
            .iter()
            .min_by_key(|(_, e)| e.used)
            .map(|(k, _)| *k)
        else {
            return false;
        };
        if let Some(e) = self.entries.remove(&oldest) {
            self.bytes -= e.source.len();
        }
        true
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::guard::Decision;

    fn ctx(ws: &str, roots: &[&str]) -> CheckContext {
        CheckContext {
            workspace: PathBuf::from(ws),
            allowed_roots: roots.iter().map(PathBuf::from).collect(),
        }
    }

    #[test]
    fn a_hit_needs_the_same_source_policy_and_roots() {
        let guard = Guard::with_default_policy().unwrap();
        let cache = VerdictCache::default();
        let code = b"print(open('/data/in.csv').read())";
        let granted = ctx("/ws", &["/data"]);
        let bare = ctx("/ws", &[]);
        assert_eq!(
            cache.check(&guard, code, &granted).decision,
            Decision::Allowed
        );
        assert_eq!(cache.check(&guard, code, &bare).decision, Decision::Blocked);
        assert_eq!(cache.stats().misses, 2);
        assert_eq!(
            cache.check(&guard, code, &granted).decision,
            Decision::Allowed
        );
        assert_eq!(cache.check(&guard, code, &bare).decision, Decision::Blocked);
        assert_eq!(cache.stats().hits, 2);
        // The same text under another workspace is another question.
        let moved = ctx("/data", &[]);
        assert_eq!(
            cache.check(&guard, code, &moved).decision,
            Decision::Allowed
        );
        // Another policy never sees this policy's verdicts.
        let strict = crate::guard::DEFAULT_POLICY
            .replace("\"os\", \"posix\"", "\"os\", \"json\", \"posix\"");
        let other = Guard::from_policy_toml(&strict).unwrap();
        assert_ne!(other.policy_digest(), guard.policy_digest());
        let json = b"import json";
        assert_eq!(cache.check(&guard, json, &bare).decision, Decision::Allowed);
        assert_eq!(cache.check(&other, json, &bare).decision, Decision::Blocked);
    }

    #[test]
    fn stays_within_its_bounds_and_keeps_the_recent() {
        let guard = Guard::with_default_policy().unwrap();
        let cache = VerdictCache::new(4, 1 << 20);
        let c = ctx("/ws", &[]);
        let sources: Vec<String> = (0..6).map(|i| format!("x = {i}")).collect();
        for s in &sources[..4] {
            cache.check(&guard, s.as_bytes(), &c);
        }
        // Touch the first so that the second is the oldest.
        cache.check(&guard, sources[0].as_bytes(), &c);
        cache.check(&guard, sources[4].as_bytes(), &c);
        assert_eq!(cache.stats().entries, 4);
        assert!(cache.get(&guard, sources[0].as_bytes(), &c).is_ok());
        assert!(cache.get(&guard, sources[1].as_bytes(), &c).is_err());
        let small = VerdictCache::new(100, 10);
        small.check(&guard, b"x = 12345", &c);
        small.check(&guard, b"y = 12345", &c);
        assert_eq!(small.stats().entries, 1);
        assert!(small.stats().bytes <= 10);
        // A source bigger than the whole cache is checked but not kept.
        let huge = VerdictCache::new(100, 4);
        huge.check(&guard, b"x = 12345", &c);
        assert_eq!(huge.stats().entries, 0);
    }
}
