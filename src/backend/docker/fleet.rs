//! The engines a Docker backend places sessions on (`SANDBOX_DOCKER_HOSTS`, or the one
//! `DOCKER_HOST` names): which engine a new session goes to, which engines answer, and
//! what happens to a session whose engine stops answering.
//!
//! - **Placement** ([`place`], pure): a new home (a session's, or a warm container's)
//!   goes to the healthy engine with the most free capacity, the first listed on a tie.
//!   A session stays on its engine for its whole life.
//! - **Health.** Each engine is asked every [`CHECK_EVERY`], and again at once when a
//!   worker on it dies or does not start. An engine that does not answer is down: its
//!   generation moves on, so every session placed before ends with an error naming the
//!   engine (the session layer asks [`Fleet::lost`]), and new homes go elsewhere.
//! - **Return.** An engine that answers again first has every container of this
//!   instance removed (through its own API, by label), then takes new homes.
//! - **Engines that failed at start** (refused TLS, no image) are tried again every
//!   [`RETRY_START`], and join when they come up.
//!
//! The engine-specific state (client, image facts, runtime, quota, launcher) is one
//! [`Inner`] per engine; the identities containers run as are shared, so no two sessions
//! on any engines share a uid.

use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use super::Inner;
use crate::backend::docker_settings::EngineSpec;

/// How often each engine is asked whether it answers.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);
/// How long one engine may take to answer a health check.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// How often an engine that could not be set up at start is tried again.
pub const RETRY_START: Duration = Duration::from_secs(5);

/// One engine's load, as placement sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Load {
    pub up: bool,
    pub capacity: usize,
    pub placed: usize,
}

/// The engine a new home goes to: the healthy engine with the most free capacity, the
/// first listed on a tie; `None` when every engine is down or full. Pure.
pub fn place(loads: &[Load]) -> Option<usize> {
    let mut best: Option<(usize, usize)> = None;
    for (i, load) in loads.iter().enumerate() {
        let free = load.capacity.saturating_sub(load.placed);
        if load.up && free > 0 && best.is_none_or(|(_, most)| free > most) {
            best = Some((i, free));
        }
    }
    best.map(|(i, _)| i)
}

/// What one engine is now.
#[derive(Debug, Clone)]
struct Health {
    up: bool,
    /// Moves on each time the engine is found down: homes placed in an earlier
    /// generation have lost their containers.
    generation: u64,
    /// Homes of this generation on the engine.
    placed: usize,
    /// Why it is down (or was never set up).
    why: Option<String>,
}

/// One engine: its spec, its state once set up, its health.
pub(crate) struct Member {
    pub url: String,
    spec: EngineSpec,
    /// Homes it holds at once; `None`: no limit of its own.
    capacity: Option<usize>,
    inner: RwLock<Option<Arc<Inner>>>,
    health: Mutex<Health>,
    /// When setting it up was last tried (for engines that failed at start).
    tried: Mutex<Instant>,
}

impl Member {
    /// Its load, as placement sees it, given its health.
    fn load(&self, h: &Health) -> Load {
        Load {
            up: h.up,
            capacity: self.capacity.unwrap_or(usize::MAX),
            placed: h.placed,
        }
    }
}

/// Where a home was placed: the engine's index and generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    pub engine: usize,
    pub generation: u64,
}

/// How one engine is doing, for `warden://settings`.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema, PartialEq, Eq)]
pub struct EngineStatus {
    pub url: String,
    pub up: bool,
    pub sessions: usize,
    /// `None`: no limit of its own.
    pub capacity: Option<usize>,
    pub tls: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Sets up one engine (the backend's start for it).
pub(crate) type Setup = Arc<
    dyn Fn(
            usize,
            EngineSpec,
        ) -> std::pin::Pin<Box<dyn Future<Output = Result<Inner, String>> + Send>>
        + Send
        + Sync,
>;

/// The engines, their health and what is placed on them.
pub(crate) struct Fleet {
    pub(crate) members: Vec<Member>,
    /// The first engine set up at start (the backend's facts when none answers).
    pub(crate) first: Arc<Inner>,
    setup: Setup,
    instance: String,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Fleet {
    /// Sets up every engine at once. Engines that fail are kept, down, with the reason,
    /// and tried again later; `Err` with every reason when none could be set up.
    pub(crate) async fn start(
        specs: Vec<EngineSpec>,
        instance: String,
        setup: Setup,
    ) -> Result<Arc<Fleet>, Vec<(String, String)>> {
        let started = futures_util::future::join_all(
            specs
                .iter()
                .enumerate()
                .map(|(i, spec)| (setup)(i, spec.clone())),
        )
        .await;
        let mut members = Vec::new();
        let mut failures = Vec::new();
        for (spec, result) in specs.into_iter().zip(started) {
            let url = super::engine::url_of(&spec);
            let (inner, why) = match result {
                Ok(inner) => (Some(Arc::new(inner)), None),
                Err(why) => {
                    tracing::warn!(engine = %url, reason = %why, "a Docker engine could not be set up; it is tried again every few seconds");
                    failures.push((url.clone(), why.clone()));
                    (None, Some(why))
                }
            };
            members.push(Member {
                capacity: spec.capacity,
                spec,
                health: Mutex::new(Health {
                    up: inner.is_some(),
                    generation: 0,
                    placed: 0,
                    why,
                }),
                inner: RwLock::new(inner),
                tried: Mutex::new(Instant::now()),
                url,
            });
        }
        let Some(first) = members.iter().find_map(|m| {
            m.inner
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone()
        }) else {
            return Err(failures);
        };
        let fleet = Arc::new(Fleet {
            first,
            members,
            setup,
            instance,
        });
        tokio::spawn(watch(Arc::downgrade(&fleet)));
        Ok(fleet)
    }

    /// The engine's state, when it was set up.
    pub(crate) fn inner(&self, engine: usize) -> Option<Arc<Inner>> {
        let member = self.members.get(engine)?;
        member
            .inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Every engine set up so far.
    pub(crate) fn inners(&self) -> Vec<Arc<Inner>> {
        (0..self.members.len())
            .filter_map(|i| self.inner(i))
            .collect()
    }

    /// Places a new home; `Err` says why no engine can take it. When none can, the
    /// engines that are down are asked again first (one that answers again is brought
    /// back now, not at its next check). Blocking: call it off the async runtime.
    pub(crate) fn place(&self) -> Result<(Placed, Arc<Inner>), String> {
        match self.place_now() {
            Ok(placed) => Ok(placed),
            Err(why) => match tokio::runtime::Handle::try_current() {
                Ok(rt) if self.up() < self.members.len() => {
                    rt.block_on(self.check_down());
                    self.place_now()
                }
                _ => Err(why),
            },
        }
    }

    /// Checks every engine that is down now.
    async fn check_down(&self) {
        let down = (0..self.members.len()).filter(|i| !lock(&self.members[*i].health).up);
        futures_util::future::join_all(down.map(|i| self.check(i))).await;
    }

    fn place_now(&self) -> Result<(Placed, Arc<Inner>), String> {
        let mut healths: Vec<std::sync::MutexGuard<'_, Health>> =
            self.members.iter().map(|m| lock(&m.health)).collect();
        let loads: Vec<Load> = healths
            .iter()
            .zip(&self.members)
            .map(|(h, m)| m.load(h))
            .collect();
        let chosen = place(&loads).and_then(|i| self.inner(i).map(|inner| (i, inner)));
        let Some((i, inner)) = chosen else {
            return Err(self.why_none(&healths));
        };
        healths[i].placed += 1;
        let placed = Placed {
            engine: i,
            generation: healths[i].generation,
        };
        Ok((placed, inner))
    }

    fn why_none(&self, healths: &[std::sync::MutexGuard<'_, Health>]) -> String {
        let each: Vec<String> = healths
            .iter()
            .zip(&self.members)
            .map(|(h, m)| match (&h.why, h.up) {
                (Some(why), _) => format!("{} is down ({why})", m.url),
                (None, false) => format!("{} is down", m.url),
                (None, true) => format!(
                    "{} is full ({} of {})",
                    m.url,
                    h.placed,
                    m.capacity.unwrap_or(usize::MAX)
                ),
            })
            .collect();
        format!(
            "no Docker engine can take a new session: {}; wait for a session to close or an engine to return, or list more engines in SANDBOX_DOCKER_HOSTS",
            each.join("; ")
        )
    }

    /// A home leaves its engine.
    pub(crate) fn release(&self, placed: Placed) {
        if let Some(m) = self.members.get(placed.engine) {
            let mut h = lock(&m.health);
            if h.generation == placed.generation {
                h.placed = h.placed.saturating_sub(1);
            }
        }
    }

    /// Why a home's engine is lost to it (down now, or down since it was placed), as
    /// its error says; `None` while it answers.
    pub(crate) fn lost_now(&self, placed: Placed) -> Option<String> {
        let m = self.members.get(placed.engine)?;
        let h = lock(&m.health);
        if h.up && h.generation == placed.generation {
            return None;
        }
        Some(lost_message(&m.url, h.why.as_deref()))
    }

    /// As [`Fleet::lost_now`], asking the engine first: a worker on it just died or did
    /// not start, which is how a lost engine is often seen first.
    pub(crate) async fn lost(&self, placed: Placed) -> Option<String> {
        if let Some(why) = self.lost_now(placed) {
            return Some(why);
        }
        let inner = self.inner(placed.engine)?;
        if let Err(why) = answers(&inner).await {
            self.mark_down(placed.engine, why);
        }
        self.lost_now(placed)
    }

    /// A placed home's engine against the engine a new home would go to: its free
    /// capacity, counting the home's own place as free (a session taking it adds
    /// nothing there), less the most free capacity of any engine that answers. 0 or
    /// more: taking it places the session as well as a new home would. `None` when the
    /// home's engine is lost.
    pub(crate) fn rank(&self, placed: Placed) -> Option<i64> {
        let loads = self.loads();
        let own = loads.get(placed.engine)?;
        let generation = lock(&self.members[placed.engine].health).generation;
        if !own.up || generation != placed.generation {
            return None;
        }
        let free = |l: &Load| l.capacity.saturating_sub(l.placed) as i128;
        let best = loads.iter().filter(|l| l.up).map(free).max().unwrap_or(0);
        Some((free(own) + 1 - best).clamp(i64::MIN.into(), i64::MAX.into()) as i64)
    }

    /// Every engine's load now.
    fn loads(&self) -> Vec<Load> {
        self.members
            .iter()
            .map(|m| m.load(&lock(&m.health)))
            .collect()
    }

    /// Engines answering now.
    pub(crate) fn up(&self) -> usize {
        self.members.iter().filter(|m| lock(&m.health).up).count()
    }

    pub(crate) fn status(&self) -> Vec<EngineStatus> {
        self.members
            .iter()
            .map(|m| {
                let h = lock(&m.health).clone();
                EngineStatus {
                    url: m.url.clone(),
                    up: h.up,
                    sessions: h.placed,
                    capacity: m.capacity,
                    tls: m.spec.tls,
                    reason: h.why,
                }
            })
            .collect()
    }

    fn mark_down(&self, engine: usize, why: String) {
        let Some(m) = self.members.get(engine) else {
            return;
        };
        let mut h = lock(&m.health);
        if h.up {
            tracing::warn!(engine = %m.url, reason = %why, "a Docker engine stopped answering; its sessions end");
            h.up = false;
            h.generation += 1;
            h.placed = 0;
        }
        h.why = Some(why);
    }

    /// One engine's check: set up one that never was; find one down that stopped
    /// answering; bring back one that answers again, after removing its containers.
    async fn check(&self, engine: usize) {
        let Some(m) = self.members.get(engine) else {
            return;
        };
        let Some(inner) = self.inner(engine) else {
            return self.retry_setup(engine).await;
        };
        let up = lock(&m.health).up;
        match (up, answers(&inner).await) {
            (true, Err(why)) => self.mark_down(engine, why),
            (false, Ok(())) => {
                super::engine::remove_instance(&inner.docker, &self.instance).await;
                super::volume::remove_instance(&inner.docker, &self.instance).await;
                let mut h = lock(&m.health);
                h.up = true;
                h.why = None;
                tracing::info!(engine = %m.url, "a Docker engine answers again; this instance's containers on it were removed");
            }
            _ => {}
        }
    }

    async fn retry_setup(&self, engine: usize) {
        let Some(m) = self.members.get(engine) else {
            return;
        };
        {
            let mut tried = lock(&m.tried);
            if tried.elapsed() < RETRY_START {
                return;
            }
            *tried = Instant::now();
        }
        match (self.setup)(engine, m.spec.clone()).await {
            Ok(inner) => {
                *m.inner
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(inner));
                let mut h = lock(&m.health);
                h.up = true;
                h.why = None;
                tracing::info!(engine = %m.url, "a Docker engine was set up and takes sessions");
            }
            Err(why) => lock(&m.health).why = Some(why),
        }
    }

    fn closing(&self) -> bool {
        self.inners().iter().any(|i| i.is_closing())
    }
}

/// Whether the engine answers, within [`CHECK_TIMEOUT`].
async fn answers(inner: &Inner) -> Result<(), String> {
    match tokio::time::timeout(CHECK_TIMEOUT, inner.docker.ping()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(super::causes(&e)),
        Err(_) => Err(format!("no answer within {} s", CHECK_TIMEOUT.as_secs())),
    }
}

/// What a session whose engine is lost is told.
fn lost_message(url: &str, why: Option<&str>) -> String {
    format!(
        "the Docker engine {url} that ran this session stopped answering{}; the session has ended (its container, variables and files there are gone); close it with reset_session and open a new one, which goes to an engine that answers",
        why.map(|w| format!(" ({w})")).unwrap_or_default()
    )
}

/// Checks every engine every [`CHECK_EVERY`] until the backend is gone or closing.
async fn watch(fleet: Weak<Fleet>) {
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        let Some(fleet) = fleet.upgrade() else {
            return;
        };
        if fleet.closing() {
            return;
        }
        let checks = (0..fleet.members.len()).map(|i| fleet.check(i));
        futures_util::future::join_all(checks).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(up: bool, capacity: usize, placed: usize) -> Load {
        Load {
            up,
            capacity,
            placed,
        }
    }

    #[test]
    fn a_new_home_goes_to_the_healthy_engine_with_the_most_free_capacity() {
        assert_eq!(place(&[]), None);
        assert_eq!(
            place(&[load(true, 8, 2), load(true, 8, 1), load(true, 8, 5)]),
            Some(1)
        );
        assert_eq!(
            place(&[load(true, 4, 0), load(true, 4, 0)]),
            Some(0),
            "the first listed on a tie"
        );
        assert_eq!(
            place(&[load(true, 4, 1), load(true, 10, 5)]),
            Some(1),
            "free capacity, not fewest sessions"
        );
        assert_eq!(
            place(&[load(false, 64, 0), load(true, 2, 1)]),
            Some(1),
            "never a down engine"
        );
        assert_eq!(
            place(&[load(true, 2, 2), load(false, 2, 0)]),
            None,
            "full or down"
        );
        assert_eq!(place(&[load(true, 2, 9)]), None, "over capacity is full");
    }

    #[test]
    fn homes_spread_evenly_over_equal_engines() {
        let mut loads = vec![load(true, 64, 0); 3];
        for _ in 0..64 {
            let i = place(&loads).unwrap();
            loads[i].placed += 1;
        }
        let placed: Vec<usize> = loads.iter().map(|l| l.placed).collect();
        assert_eq!(placed, vec![22, 21, 21]);
    }

    #[test]
    fn a_lost_engine_says_its_name_and_what_to_do() {
        let text = lost_message("tcp://192.0.2.2:2376", Some("connection refused"));
        assert!(text.contains("tcp://192.0.2.2:2376"), "{text}");
        assert!(text.contains("connection refused"), "{text}");
        assert!(text.contains("reset_session"), "{text}");
    }
}
