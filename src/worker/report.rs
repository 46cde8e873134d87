//! What the sandbox helper tells the server before it execs the interpreter: which walls
//! are standing, which are not, and why. The same facts go into every result (as
//! warnings when a wall is missing) and into `selftest`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct WallStatus {
    /// landlock, seccomp, no_new_privs, privileges, namespaces, world, disk_quota,
    /// w_xor_x, rlimits, environment, process_group, inherited_fds.
    pub name: String,
    pub enforced: bool,
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SandboxReport {
    /// The HOST_SANDBOX mode the worker was started under.
    pub mode: String,
    pub walls: Vec<WallStatus>,
    /// The kernel's Landlock ABI, when Landlock is available.
    pub landlock_abi: Option<i32>,
    /// The uid the code runs as.
    pub uid: u32,
    /// The workspace as the code sees it: `/workspace` in its private world, the host
    /// directory when there is none.
    #[serde(default)]
    pub workspace: String,
}

impl SandboxReport {
    /// Walls that are not in force, as human-readable warnings.
    pub fn warnings(&self) -> Vec<String> {
        if self.mode == "off" {
            return vec![
                "HOST_SANDBOX=off: this code ran WITHOUT any operating-system sandbox \
                 (development only); it could read, write and reach everything the server can"
                    .to_string(),
            ];
        }
        self.walls
            .iter()
            .filter(|w| !w.enforced)
            .map(|w| format!("sandbox wall '{}' is not enforced: {}", w.name, w.detail))
            .collect()
    }
}

/// One line from the helper on the worker's response pipe, before the interpreter runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum HelperMessage {
    Sandbox { report: SandboxReport },
    SandboxError { wall: String, message: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(mode: &str, enforced: bool) -> SandboxReport {
        SandboxReport {
            mode: mode.into(),
            walls: vec![WallStatus {
                name: "landlock".into(),
                enforced,
                detail: "kernel too old".into(),
            }],
            landlock_abi: None,
            uid: 1000,
            workspace: "/workspace".into(),
        }
    }

    #[test]
    fn missing_walls_become_warnings() {
        assert!(report("best-effort", true).warnings().is_empty());
        let w = report("best-effort", false).warnings();
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("landlock"));
        assert!(report("off", true).warnings()[0].contains("WITHOUT"));
    }
}
