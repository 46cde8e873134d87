//! Resource limits for the worker. [`rlimits_for`] is the pure builder (soft = hard,
//! except CPU, whose soft limit sends SIGXCPU a little before the hard kill);
//! [`apply`] sets them on the helper, and execve carries them into the interpreter.

use crate::sandbox::policy::Limits;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rlimit {
    pub resource: libc::__rlimit_resource_t,
    pub name: &'static str,
    pub soft: u64,
    pub hard: u64,
}

fn same(resource: libc::__rlimit_resource_t, name: &'static str, value: u64) -> Rlimit {
    Rlimit {
        resource,
        name,
        soft: value,
        hard: value,
    }
}

/// The full list of rlimits for a worker. Pure.
pub fn rlimits_for(limits: &Limits) -> Vec<Rlimit> {
    let mut out = vec![
        same(libc::RLIMIT_AS, "RLIMIT_AS", limits.address_space_bytes),
        Rlimit {
            resource: libc::RLIMIT_CPU,
            name: "RLIMIT_CPU",
            soft: limits.cpu_seconds,
            hard: limits.cpu_seconds + 5,
        },
        same(libc::RLIMIT_FSIZE, "RLIMIT_FSIZE", limits.file_size_bytes),
        same(libc::RLIMIT_NOFILE, "RLIMIT_NOFILE", limits.open_files),
        same(libc::RLIMIT_CORE, "RLIMIT_CORE", 0),
        same(libc::RLIMIT_MEMLOCK, "RLIMIT_MEMLOCK", 64 << 10),
        same(libc::RLIMIT_MSGQUEUE, "RLIMIT_MSGQUEUE", 0),
        same(libc::RLIMIT_RTPRIO, "RLIMIT_RTPRIO", 0),
        same(libc::RLIMIT_NICE, "RLIMIT_NICE", 0),
        same(libc::RLIMIT_STACK, "RLIMIT_STACK", 8 << 20),
    ];
    if let Some(tasks) = limits.processes {
        out.push(same(libc::RLIMIT_NPROC, "RLIMIT_NPROC", tasks));
    }
    out
}

/// Sets every limit on the calling process.
///
/// # Errors
/// The name of the first limit the kernel refused, with the OS error.
pub fn apply(limits: &[Rlimit]) -> Result<(), String> {
    for limit in limits {
        let value = libc::rlimit {
            rlim_cur: limit.soft,
            rlim_max: limit.hard,
        };
        // SAFETY: setrlimit reads a valid, initialised struct.
        if unsafe { libc::setrlimit(limit.resource, &value) } != 0 {
            return Err(format!(
                "setrlimit({}) failed: {}",
                limit.name,
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_exhaustion_vector_is_bounded() {
        let limits = Limits {
            address_space_bytes: 2 << 30,
            cpu_seconds: 3600,
            file_size_bytes: 256 << 20,
            open_files: 256,
            processes: Some(256),
        };
        let list = rlimits_for(&limits);
        let find = |r| list.iter().find(|l| l.resource == r).copied().unwrap();
        assert_eq!(find(libc::RLIMIT_AS).hard, 2 << 30);
        assert_eq!(find(libc::RLIMIT_NOFILE).soft, 256);
        assert_eq!(find(libc::RLIMIT_CORE).hard, 0);
        assert_eq!(find(libc::RLIMIT_NPROC).hard, 256);
        assert_eq!(find(libc::RLIMIT_FSIZE).hard, 256 << 20);
        let cpu = find(libc::RLIMIT_CPU);
        assert!(cpu.soft < cpu.hard);
        assert!(list.iter().all(|l| l.soft <= l.hard));
    }

    #[test]
    fn no_process_limit_without_a_dedicated_uid() {
        let limits = Limits {
            address_space_bytes: 1 << 30,
            cpu_seconds: 10,
            file_size_bytes: 1 << 20,
            open_files: 64,
            processes: None,
        };
        assert!(
            !rlimits_for(&limits)
                .iter()
                .any(|l| l.resource == libc::RLIMIT_NPROC)
        );
    }
}
