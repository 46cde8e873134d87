//! Windows: the worker policy as a job object (memory, one process, killed with the
//! job) plus a low integrity level. A pure builder, unit-tested on every platform; the
//! Win32 glue that would apply it is not in this build, so `selftest` reports the
//! mechanism as `unsupported` elsewhere. The plan names what Windows cannot enforce
//! without administrator rights.

use crate::config::NetworkMode;
use crate::sandbox::policy::WorkerPolicy;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobObjectLimits {
    /// JOB_OBJECT_LIMIT_PROCESS_MEMORY.
    pub process_memory_bytes: u64,
    /// JOB_OBJECT_LIMIT_ACTIVE_PROCESS: the interpreter alone, no children.
    pub active_processes: u32,
    /// JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE: the worker dies with the server.
    pub kill_on_job_close: bool,
    /// JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION: no error dialog holding the job.
    pub die_on_unhandled_exception: bool,
    /// JOB_OBJECT_UILIMIT_* restrictions.
    pub ui_restrictions: Vec<&'static str>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntegrityLevel {
    /// Cannot write to medium-integrity objects (the user's files, registry).
    Low,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowsPlan {
    pub job: JobObjectLimits,
    pub integrity: IntegrityLevel,
    /// What this plan cannot enforce, each with its reason.
    pub gaps: Vec<String>,
}

/// The Windows confinement plan for one worker. Pure.
pub fn windows_plan(policy: &WorkerPolicy) -> WindowsPlan {
    let mut gaps = vec![
        "filesystem reads: a low integrity level stops writes to the user's files, not reads"
            .to_string(),
    ];
    if policy.network == NetworkMode::Deny {
        gaps.push(
            "network: not enforceable without administrator rights (Windows Filtering Platform rules)"
                .to_string(),
        );
    }
    WindowsPlan {
        job: JobObjectLimits {
            process_memory_bytes: policy.limits.address_space_bytes,
            active_processes: 1,
            kill_on_job_close: true,
            die_on_unhandled_exception: true,
            ui_restrictions: vec![
                "DESKTOP",
                "DISPLAYSETTINGS",
                "EXITWINDOWS",
                "GLOBALATOMS",
                "HANDLES",
                "READCLIPBOARD",
                "SYSTEMPARAMETERS",
                "WRITECLIPBOARD",
            ],
        },
        integrity: IntegrityLevel::Low,
        gaps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(network: NetworkMode) -> WorkerPolicy {
        crate::sandbox::policy::example_policy(network)
    }

    #[test]
    fn job_object_bounds_memory_and_processes_and_dies_with_the_server() {
        let plan = windows_plan(&policy(NetworkMode::Deny));
        assert_eq!(plan.job.process_memory_bytes, 2 << 30);
        assert_eq!(plan.job.active_processes, 1);
        assert!(plan.job.kill_on_job_close);
        assert_eq!(plan.integrity, IntegrityLevel::Low);
    }

    #[test]
    fn gaps_are_named_honestly() {
        let plan = windows_plan(&policy(NetworkMode::Deny));
        assert!(plan.gaps.iter().any(|g| g.contains("administrator")));
        let plan = windows_plan(&policy(NetworkMode::Allow));
        assert!(!plan.gaps.iter().any(|g| g.contains("administrator")));
    }
}
