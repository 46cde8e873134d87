//! Identity and capabilities: the uid change of a root server, and dropping every
//! capability (the creator of a user namespace holds all of them inside it).

const CAP_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct CapData {
    pub effective: u32,
    pub permitted: u32,
    pub inheritable: u32,
}

fn os_error(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

/// The calling thread's capability sets.
///
/// # Errors
/// capget's refusal.
pub fn read_caps() -> Result<[CapData; 2], String> {
    let mut header = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget writes two CapData structs for version 3, which `data` holds.
    let rc = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    if rc != 0 {
        return Err(os_error("capget"));
    }
    Ok(data)
}

/// Whether any capability is still effective or permitted.
pub fn holds_capabilities(caps: &[CapData; 2]) -> bool {
    caps.iter().any(|c| c.effective != 0 || c.permitted != 0)
}

fn drop_bounding_set() {
    for cap in 0..64 {
        // SAFETY: plain prctl; EINVAL past the last capability and EPERM without
        // CAP_SETPCAP are expected and harmless (no_new_privs stops file capabilities).
        unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
    }
}

/// Drops every capability: bounding set, ambient, effective, permitted, inheritable.
///
/// # Errors
/// capset's refusal, or capabilities still held afterwards.
pub fn clear_all_capabilities() -> Result<(), String> {
    drop_bounding_set();
    // SAFETY: plain prctl.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    let mut header = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let data = [CapData::default(); 2];
    // SAFETY: capset reads two CapData structs for version 3.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
    if rc != 0 {
        return Err(os_error("capset"));
    }
    if holds_capabilities(&read_caps()?) {
        return Err("capabilities are still held after capset".to_string());
    }
    Ok(())
}

/// Becomes `uid`/`gid` with no supplementary groups (the server is root).
///
/// # Errors
/// Which call refused.
pub fn become_user(uid: u32, gid: u32) -> Result<(), String> {
    if uid == 0 || gid == 0 {
        return Err("refusing to run the worker as uid or gid 0".into());
    }
    drop_bounding_set();
    // SAFETY: plain syscalls without pointers (setgroups with an empty list).
    unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0 {
            return Err(os_error("setgroups"));
        }
        if libc::setresgid(gid, gid, gid) != 0 {
            return Err(os_error("setresgid"));
        }
        if libc::setresuid(uid, uid, uid) != 0 {
            return Err(os_error("setresuid"));
        }
    }
    Ok(())
}
