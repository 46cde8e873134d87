//! The container configuration, as data: [`container_config`] builds the hardened
//! configuration of one worker container from a [`ContainerPlan`], and
//! [`validate_container_config`] checks any configuration against warden's rules before
//! it is sent (it runs before every API call that would create a container). Both are
//! pure; the only fact from the system, whether a path is a socket, is passed in.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use bollard::models::{
    ContainerCreateBody, HostConfig, HostConfigLogConfig, Mount, MountBindOptions,
    MountBindOptionsPropagationEnum, MountTmpfsOptions, MountType, MountVolumeOptions,
};

use crate::config::NetworkMode;
use crate::grants::{Access, MaskKind};

/// Where the launcher (a Linux warden binary: the server's own, bound read-only, or the
/// image's) sits in every container.
pub const LAUNCHER_PATH: &str = "/opt/warden/warden";
/// The session's workspace inside the container.
pub const WORKSPACE: &str = crate::workspace::IN_WORLD;
/// Label every warden container carries; its value is the instance.
pub const LABEL_INSTANCE: &str = "dev.warden.instance";
pub const LABEL_PID: &str = "dev.warden.pid";
pub const LABEL_PID_START: &str = "dev.warden.pid-start";
pub const LABEL_HOST: &str = "dev.warden.host";
pub const LABEL_BOOT: &str = "dev.warden.boot-id";
pub const LABEL_ROLE: &str = "dev.warden.role";

/// Who owns a container: the server instance, told apart from every other on a shared
/// engine, and whether it is still alive (pid and its start time, this boot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub instance: String,
    pub pid: u32,
    pub pid_start: u64,
    pub host: String,
    pub boot_id: String,
}

impl Owner {
    pub fn labels(&self, role: &str) -> HashMap<String, String> {
        HashMap::from([
            (LABEL_INSTANCE.to_string(), self.instance.clone()),
            (LABEL_PID.to_string(), self.pid.to_string()),
            (LABEL_PID_START.to_string(), self.pid_start.to_string()),
            (LABEL_HOST.to_string(), self.host.clone()),
            (LABEL_BOOT.to_string(), self.boot_id.clone()),
            (LABEL_ROLE.to_string(), role.to_string()),
        ])
    }
}

/// One approved object bound into the container at its own path, without the other
/// file systems mounted inside it, and the entries inside it to hide (absolute paths).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundGrant {
    pub path: PathBuf,
    pub access: Access,
    pub hidden: Vec<(PathBuf, MaskKind)>,
}

/// Where a container's `/workspace` comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkspaceSource<'a> {
    /// The session's (or the pooled container's) directory on this machine, bound.
    Host(&'a Path),
    /// A volume of the engine's by name (the session's size-capped tmpfs, which the
    /// backend made): always named with [`VOLUME_PREFIX`].
    Volume(&'a str),
    /// A tmpfs of the container's own (the start-up query on an engine that cannot see
    /// this machine's files).
    Scratch,
}

/// Set in a container whose workspace is a volume: its launcher fingerprints the
/// workspace before each response (see [`super::frames::Stream::Workspace`]).
pub const FINGERPRINT_ENV: &str = "WARDEN_WORKSPACE_FINGERPRINT";

/// The name every workspace volume of warden's begins with; no other volume is ever
/// mounted.
pub const VOLUME_PREFIX: &str = "warden-ws-";

/// Everything one worker container is made of.
#[derive(Debug, Clone)]
pub struct ContainerPlan<'a> {
    pub image: &'a str,
    pub user: (u32, u32),
    pub owner: &'a Owner,
    /// "pool" (started ahead) or "session".
    pub role: &'a str,
    /// The warden binary on this machine, bound at [`LAUNCHER_PATH`]; `None`: the
    /// image's own launcher is there (see [`super::route`]).
    pub launcher: Option<&'a Path>,
    /// Where the container's `/workspace` comes from.
    pub workspace: WorkspaceSource<'a>,
    pub grants: &'a [BoundGrant],
    /// An empty read-only file of the server's, bound over each file a grant hides.
    pub empty_file: &'a Path,
    pub memory_bytes: u64,
    pub pids_limit: u64,
    pub tmp_bytes: u64,
    pub network: NetworkMode,
    /// The session's package layer, bound read-only at [`crate::packages::MOUNT`].
    pub packages: Option<&'a Path>,
    /// The OCI runtime by name (`SANDBOX_DOCKER_RUNTIME`); `None`: the engine's default.
    pub runtime: Option<&'a str>,
    /// The runtime is a user-space kernel without Landlock (gVisor): the image's account
    /// files, which Landlock hides under runc, are covered by the empty file.
    pub mask_accounts: bool,
    /// The container's user namespace mode (Podman's `keep-id` for a rootless Podman,
    /// see [`super::product`]); `None`: the engine's.
    pub userns: Option<&'a str>,
}

/// The image's account databases readable by anyone: hidden from the code where
/// Landlock cannot hide them (`/etc/shadow` and `/etc/gshadow` are root's alone, and a
/// container never runs as root).
pub const ACCOUNT_FILES: &[&str] = &["/etc/passwd", "/etc/group"];

fn bind(source: &Path, target: &str, read_only: bool) -> Mount {
    Mount {
        target: Some(target.to_string()),
        source: Some(source.display().to_string()),
        typ: Some(MountType::BIND),
        read_only: Some(read_only),
        bind_options: Some(MountBindOptions {
            propagation: Some(MountBindOptionsPropagationEnum::RPRIVATE),
            // Exactly one file system: what is mounted inside the source stays out.
            non_recursive: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// What covers an entry a grant hides: an empty read-only tmpfs over a directory, the
/// empty file over anything else. (The engine mounts shallower targets first, so each
/// lands on its grant.)
fn hide(path: &Path, kind: MaskKind, empty_file: &Path) -> Mount {
    let target = path.display().to_string();
    match kind {
        MaskKind::Dir => Mount {
            target: Some(target),
            typ: Some(MountType::TMPFS),
            read_only: Some(true),
            tmpfs_options: Some(MountTmpfsOptions {
                size_bytes: Some(4096),
                mode: Some(0o555),
                ..Default::default()
            }),
            ..Default::default()
        },
        MaskKind::File => bind(empty_file, &target, true),
    }
}

/// The container's `/workspace`.
fn workspace_mount(source: WorkspaceSource<'_>) -> Mount {
    match source {
        WorkspaceSource::Host(dir) => bind(dir, WORKSPACE, false),
        WorkspaceSource::Volume(name) => Mount {
            target: Some(WORKSPACE.to_string()),
            source: Some(name.to_string()),
            typ: Some(MountType::VOLUME),
            read_only: Some(false),
            volume_options: Some(MountVolumeOptions {
                no_copy: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        },
        WorkspaceSource::Scratch => Mount {
            target: Some(WORKSPACE.to_string()),
            typ: Some(MountType::TMPFS),
            tmpfs_options: Some(MountTmpfsOptions {
                size_bytes: Some(1 << 20),
                mode: Some(0o1777),
                ..Default::default()
            }),
            ..Default::default()
        },
    }
}

/// The hardened configuration of one worker container. Pure.
pub fn container_config(plan: &ContainerPlan<'_>) -> ContainerCreateBody {
    let mut mounts: Vec<Mount> = plan
        .launcher
        .map(|l| bind(l, LAUNCHER_PATH, true))
        .into_iter()
        .collect();
    mounts.push(workspace_mount(plan.workspace));
    if let Some(layer) = plan.packages {
        mounts.push(bind(layer, crate::packages::MOUNT, true));
    }
    if plan.mask_accounts {
        mounts.extend(ACCOUNT_FILES.iter().map(|f| bind(plan.empty_file, f, true)));
    }
    for g in plan.grants {
        let target = g.path.display().to_string();
        mounts.push(bind(&g.path, &target, g.access == Access::Read));
        mounts.extend(
            g.hidden
                .iter()
                .map(|(path, kind)| hide(path, *kind, plan.empty_file)),
        );
    }
    let memory = i64::try_from(plan.memory_bytes).unwrap_or(i64::MAX);
    // Never a route out: a proxied network's one endpoint is the egress proxy, whose
    // listener the server makes inside the container's own namespace.
    let network_mode = "none";
    let host_config = HostConfig {
        mounts: Some(mounts),
        readonly_rootfs: Some(true),
        cap_drop: Some(vec!["ALL".to_string()]),
        security_opt: Some(vec!["no-new-privileges".to_string()]),
        network_mode: Some(network_mode.to_string()),
        ipc_mode: Some("private".to_string()),
        memory: Some(memory),
        memory_swap: Some(memory),
        pids_limit: Some(i64::try_from(plan.pids_limit).unwrap_or(i64::MAX)),
        tmpfs: Some(HashMap::from([(
            "/tmp".to_string(),
            format!("rw,nosuid,nodev,noexec,size={},mode=1777", plan.tmp_bytes),
        )])),
        init: Some(true),
        log_config: Some(HostConfigLogConfig {
            typ: Some("none".to_string()),
            config: None,
        }),
        privileged: Some(false),
        auto_remove: Some(false),
        runtime: plan.runtime.map(str::to_string),
        userns_mode: plan.userns.map(str::to_string),
        ..Default::default()
    };
    ContainerCreateBody {
        image: Some(plan.image.to_string()),
        user: Some(format!("{}:{}", plan.user.0, plan.user.1)),
        entrypoint: Some(vec![LAUNCHER_PATH.to_string()]),
        cmd: Some(vec![super::route::LAUNCHER_SUBCOMMAND.to_string()]),
        env: Some(
            [
                "PATH=/usr/local/bin:/usr/bin:/bin".to_string(),
                "LANG=C.UTF-8".to_string(),
            ]
            .into_iter()
            .chain(
                matches!(plan.workspace, WorkspaceSource::Volume(_))
                    .then(|| format!("{FINGERPRINT_ENV}=1")),
            )
            .collect(),
        ),
        working_dir: Some(WORKSPACE.to_string()),
        labels: Some(plan.owner.labels(plan.role)),
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        open_stdin: Some(true),
        stdin_once: Some(true),
        tty: Some(false),
        network_disabled: Some(true),
        host_config: Some(host_config),
        ..Default::default()
    }
}

/// Why a container configuration was refused before it reached the engine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("refused container configuration: {0}")]
pub struct Refused(pub String);

/// Host trees a container may never see, nor anything inside them (compared in
/// [`comparable`] form: lower case, `/` separators, no drive letter, so that one list
/// serves Linux, macOS and Windows servers).
const NEVER_INSIDE: &[&str] = &[
    "/etc",
    "/proc",
    "/sys",
    "/dev",
    "/boot",
    "/run",
    "/var/run",
    "/var/lib/docker",
    "/var/lib/containerd",
    // macOS
    "/system",
    "/library",
    "/private/etc",
    "/private/var/run",
    // Windows
    "/windows",
    "/programdata/docker",
    "/programdata/dockerdesktop",
];
/// Host directories a container may never see whole (a granted subdirectory is fine).
const NEVER_WHOLE: &[&str] = &[
    "/", "/home", "/root", "/var", "/var/lib", "/usr", "/users", "/private",
];
/// Directories whose children are whole home directories (Linux, macOS, Windows).
const HOMES: &[&str] = &["/home", "/users"];

/// `path` as the lists above are written: `\` as `/`, a drive letter dropped, lower
/// case (macOS and Windows file systems ignore case by default; on Linux this only
/// refuses more), no trailing `/`.
fn comparable(path: &str) -> String {
    let mut text = path.replace('\\', "/").to_lowercase();
    // Windows' verbatim prefix, as canonicalize returns it (`\\?\C:\...`).
    if let Some(rest) = text.strip_prefix("//?/") {
        text = rest.to_string();
    }
    let bytes = text.as_bytes();
    if bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':' {
        text.replace_range(..2, "");
    }
    while text.len() > 1 && text.ends_with('/') {
        text.pop();
    }
    if text.is_empty() { "/".into() } else { text }
}

/// Whether `path` is or contains a sensitive host tree. `path` is absolute, normalised.
fn sensitive(path: &Path) -> Option<String> {
    let text = comparable(&path.to_string_lossy());
    let here = Path::new(&text);
    for tree in NEVER_INSIDE {
        let tree = Path::new(tree);
        if here.starts_with(tree) || tree.starts_with(here) {
            return Some(format!(
                "{} is or contains {} (never mounted)",
                path.display(),
                tree.display()
            ));
        }
    }
    if NEVER_WHOLE.iter().any(|d| here == Path::new(d)) {
        return Some(format!("{} may not be mounted whole", path.display()));
    }
    if here
        .parent()
        .is_some_and(|p| HOMES.iter().any(|h| p == Path::new(h)))
    {
        return Some(format!(
            "{} is a whole home directory (grant a directory inside it)",
            path.display()
        ));
    }
    None
}

fn check_source(source: &str, is_socket: &dyn Fn(&Path) -> bool) -> Result<(), Refused> {
    let path = Path::new(source);
    if !path.is_absolute()
        || path
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err(Refused(format!(
            "bind source {source:?} is not an absolute, normalised path"
        )));
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    if is_socket(path)
        || name.ends_with(".sock")
        || name.contains("docker") && name.contains("sock")
    {
        return Err(Refused(format!(
            "{source} is a socket: no host socket (least of all the Docker socket) is ever mounted"
        )));
    }
    if let Some(why) = sensitive(path) {
        return Err(Refused(why));
    }
    Ok(())
}

fn check_mounts(hc: &HostConfig, is_socket: &dyn Fn(&Path) -> bool) -> Result<(), Refused> {
    for bind in hc.binds.iter().flatten() {
        let source = bind.split(':').next().unwrap_or_default();
        if !source.starts_with('/') {
            return Err(Refused(format!(
                "volume {source:?}: only bind mounts of checked paths"
            )));
        }
        check_source(source, is_socket)?;
    }
    for m in hc.mounts.iter().flatten() {
        match m.typ {
            Some(MountType::BIND) => {
                check_source(m.source.as_deref().unwrap_or_default(), is_socket)?;
                let propagation = m.bind_options.as_ref().and_then(|b| b.propagation);
                if matches!(
                    propagation,
                    Some(
                        MountBindOptionsPropagationEnum::SHARED
                            | MountBindOptionsPropagationEnum::RSHARED
                            | MountBindOptionsPropagationEnum::SLAVE
                            | MountBindOptionsPropagationEnum::RSLAVE
                    )
                ) {
                    return Err(Refused("bind mounts must be private".into()));
                }
                if m.bind_options.as_ref().and_then(|b| b.non_recursive) != Some(true) {
                    return Err(Refused(format!(
                        "the bind of {} must not be recursive: other file systems mounted \
                         inside it would come along",
                        m.source.as_deref().unwrap_or_default()
                    )));
                }
            }
            Some(MountType::TMPFS) => {}
            // Only the session's own workspace volume, at the workspace.
            Some(MountType::VOLUME)
                if m.source.as_deref().is_some_and(|s| {
                    s.strip_prefix(VOLUME_PREFIX).is_some_and(|rest| {
                        !rest.is_empty()
                            && rest
                                .chars()
                                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                    })
                }) && m.target.as_deref() == Some(WORKSPACE) => {}
            other => return Err(Refused(format!("mount type {other:?} is not allowed"))),
        }
    }
    if hc.volumes_from.as_ref().is_some_and(|v| !v.is_empty()) {
        return Err(Refused(
            "volumes_from shares another container's mounts".into(),
        ));
    }
    if hc.devices.as_ref().is_some_and(|d| !d.is_empty())
        || hc
            .device_cgroup_rules
            .as_ref()
            .is_some_and(|d| !d.is_empty())
        || hc.device_requests.as_ref().is_some_and(|d| !d.is_empty())
    {
        return Err(Refused("no host device is passed to a container".into()));
    }
    Ok(())
}

fn check_namespaces(hc: &HostConfig) -> Result<(), Refused> {
    let shared = |mode: &Option<String>| {
        mode.as_deref()
            .is_some_and(|m| m == "host" || m.starts_with("container:"))
    };
    for (name, mode) in [
        ("network", &hc.network_mode),
        ("pid", &hc.pid_mode),
        ("ipc", &hc.ipc_mode),
        ("uts", &hc.uts_mode),
        ("userns", &hc.userns_mode),
        ("cgroup", &hc.cgroup),
    ] {
        if shared(mode) {
            return Err(Refused(format!(
                "{name} mode {:?} shares a namespace with the host or another container",
                mode.as_deref().unwrap_or_default()
            )));
        }
    }
    if hc.ipc_mode.as_deref() == Some("shareable") {
        return Err(Refused("a shareable IPC namespace".into()));
    }
    // No route out of a container, ever: the egress proxy is its only way out.
    if hc.network_mode.as_deref() != Some("none") {
        return Err(Refused(format!(
            "network mode {:?}: a container's network is `none` (the egress proxy is its only endpoint)",
            hc.network_mode.as_deref().unwrap_or_default()
        )));
    }
    Ok(())
}

fn check_privileges(cfg: &ContainerCreateBody, hc: &HostConfig) -> Result<(), Refused> {
    if hc.privileged == Some(true) {
        return Err(Refused("privileged mode".into()));
    }
    if let Some(add) = hc.cap_add.as_ref().filter(|a| !a.is_empty()) {
        return Err(Refused(format!("added capabilities {add:?}")));
    }
    if !hc
        .cap_drop
        .iter()
        .flatten()
        .any(|c| c.eq_ignore_ascii_case("ALL"))
    {
        return Err(Refused(
            "capabilities must be dropped (cap_drop: ALL)".into(),
        ));
    }
    let opts: Vec<&str> = hc
        .security_opt
        .iter()
        .flatten()
        .map(String::as_str)
        .collect();
    if !opts
        .iter()
        .any(|o| *o == "no-new-privileges" || *o == "no-new-privileges:true")
    {
        return Err(Refused("no-new-privileges must be set".into()));
    }
    if let Some(o) = opts
        .iter()
        .find(|o| o.ends_with("=unconfined") || o.starts_with("label=disable"))
    {
        return Err(Refused(format!(
            "security option {o:?} switches a wall off"
        )));
    }
    let user = cfg.user.as_deref().unwrap_or_default();
    let uid = user.split(':').next().unwrap_or_default();
    if uid.is_empty() || uid == "0" || uid == "root" {
        return Err(Refused(format!(
            "user {user:?}: containers never run as root"
        )));
    }
    if hc.sysctls.as_ref().is_some_and(|s| !s.is_empty()) {
        return Err(Refused("sysctls".into()));
    }
    if let Some(r) = hc.runtime.as_deref()
        && !crate::backend::docker_settings::runtime_name(r)
    {
        return Err(Refused(format!("runtime {r:?} is not a runtime's name")));
    }
    Ok(())
}

fn check_limits(hc: &HostConfig) -> Result<(), Refused> {
    if hc.readonly_rootfs != Some(true) {
        return Err(Refused("the root filesystem must be read-only".into()));
    }
    let memory = hc.memory.unwrap_or(0);
    if memory <= 0 || hc.memory_swap != Some(memory) {
        return Err(Refused("a memory limit with equal swap is required".into()));
    }
    if hc.pids_limit.unwrap_or(0) <= 0 {
        return Err(Refused("a pids limit is required".into()));
    }
    for (target, opts) in hc.tmpfs.iter().flatten() {
        if !opts.split(',').any(|o| o.starts_with("size=")) {
            return Err(Refused(format!("tmpfs {target} needs a size cap")));
        }
    }
    if hc.init != Some(true) {
        return Err(Refused("an init process is required".into()));
    }
    if hc.log_config.as_ref().and_then(|l| l.typ.as_deref()) != Some("none") {
        return Err(Refused("the log driver must be none".into()));
    }
    Ok(())
}

/// Checks a container configuration against warden's rules; runs on every configuration
/// before it is sent. Refuses the Docker socket or any host socket; `/`, `/etc`,
/// `/proc`, `/sys`, `/dev`, `/var/lib/docker`, `/home`, `/root` (and whole home
/// directories); privileged mode and added capabilities; host network, pid, ipc, uts;
/// and any configuration missing a hardening warden requires.
pub fn validate_container_config(
    cfg: &ContainerCreateBody,
    is_socket: &dyn Fn(&Path) -> bool,
) -> Result<(), Refused> {
    let hc = cfg
        .host_config
        .as_ref()
        .ok_or_else(|| Refused("no host configuration".into()))?;
    if cfg
        .labels
        .as_ref()
        .is_none_or(|l| !l.contains_key(LABEL_INSTANCE))
    {
        return Err(Refused("containers carry the instance label".into()));
    }
    check_privileges(cfg, hc)?;
    check_namespaces(hc)?;
    check_mounts(hc, is_socket)?;
    check_limits(hc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> Owner {
        Owner {
            instance: "42-abcd".into(),
            pid: 42,
            pid_start: 7,
            host: "h".into(),
            boot_id: "b".into(),
        }
    }

    fn good(grants: &[BoundGrant]) -> ContainerCreateBody {
        let owner = Box::leak(Box::new(owner()));
        container_config(&ContainerPlan {
            image: "warden-sandbox:latest",
            user: (65534, 65534),
            owner,
            role: "session",
            launcher: Some(Path::new("/usr/local/bin/warden")),
            workspace: WorkspaceSource::Host(Path::new(
                "/var/lib/warden/sessions/1-aa/s/workspace",
            )),
            grants,
            empty_file: Path::new("/var/lib/warden/sessions/1-aa/empty"),
            memory_bytes: 2 << 30,
            pids_limit: 256,
            tmp_bytes: 64 << 20,
            network: NetworkMode::Deny,
            packages: None,
            runtime: None,
            mask_accounts: false,
            userns: None,
        })
    }

    #[test]
    fn under_gvisor_the_runtime_is_named_and_the_account_files_are_covered() {
        let owner = owner();
        let ws = Path::new("/srv/warden/home-1/workspace");
        let empty = Path::new("/srv/warden/hidden-empty");
        let plan = ContainerPlan {
            image: "warden-sandbox:latest",
            user: (65534, 65534),
            owner: &owner,
            role: "session",
            launcher: None,
            workspace: WorkspaceSource::Host(ws),
            grants: &[],
            empty_file: empty,
            memory_bytes: 2 << 30,
            pids_limit: 256,
            tmp_bytes: 64 << 20,
            network: NetworkMode::Deny,
            packages: None,
            runtime: Some("runsc"),
            mask_accounts: true,
            userns: None,
        };
        let cfg = container_config(&plan);
        validate_container_config(&cfg, &no_sockets).unwrap();
        let hc = cfg.host_config.as_ref().unwrap();
        assert_eq!(hc.runtime.as_deref(), Some("runsc"));
        for file in ACCOUNT_FILES {
            let m = hc
                .mounts
                .iter()
                .flatten()
                .find(|m| m.target.as_deref() == Some(file));
            let m = m.unwrap_or_else(|| panic!("{file} is not covered"));
            assert_eq!(m.source.as_deref(), Some("/srv/warden/hidden-empty"));
            assert_eq!(m.read_only, Some(true));
        }
        let mut bad = cfg.clone();
        bad.host_config.as_mut().unwrap().runtime = Some("runsc --root /".into());
        assert!(refused(&bad).contains("runtime"));
        let plain = container_config(&ContainerPlan {
            runtime: None,
            mask_accounts: false,
            userns: None,
            ..plan
        });
        let hc = plain.host_config.unwrap();
        assert_eq!(hc.runtime, None, "the engine's default");
        assert!(
            hc.mounts
                .iter()
                .flatten()
                .all(|m| m.target.as_deref() != Some("/etc/passwd"))
        );
    }

    fn no_sockets(_: &Path) -> bool {
        false
    }

    fn refused(cfg: &ContainerCreateBody) -> String {
        validate_container_config(cfg, &no_sockets)
            .expect_err("must be refused")
            .to_string()
    }

    fn hc(cfg: &mut ContainerCreateBody) -> &mut HostConfig {
        cfg.host_config.as_mut().unwrap()
    }

    #[test]
    fn the_built_configuration_is_hardened_and_accepted() {
        let cfg = good(&[]);
        validate_container_config(&cfg, &no_sockets).unwrap();
        let h = cfg.host_config.as_ref().unwrap();
        assert_eq!(h.readonly_rootfs, Some(true));
        assert_eq!(h.cap_drop, Some(vec!["ALL".to_string()]));
        assert_eq!(h.network_mode.as_deref(), Some("none"));
        assert_eq!(h.memory, h.memory_swap);
        assert_eq!(h.pids_limit, Some(256));
        assert_eq!(h.init, Some(true));
        assert_eq!(cfg.user.as_deref(), Some("65534:65534"));
        assert!(h.tmpfs.as_ref().unwrap()["/tmp"].contains("size=67108864"));
        let mounts = h.mounts.as_ref().unwrap();
        assert_eq!(
            mounts.len(),
            2,
            "the launcher and the workspace, nothing else"
        );
        assert_eq!(mounts[0].read_only, Some(true));
        assert_eq!(mounts[0].target.as_deref(), Some(LAUNCHER_PATH));
        assert_eq!(mounts[1].target.as_deref(), Some(WORKSPACE));
        assert_eq!(cfg.labels.as_ref().unwrap()[LABEL_INSTANCE], "42-abcd");
    }

    #[test]
    fn sensitive_trees_of_macos_and_windows_servers_are_refused_too() {
        for bad in [
            r"C:\",
            r"\\?\C:\Users\bob",
            r"C:\Windows\System32",
            r"c:\users",
            r"C:\Users\alice",
            r"D:\ProgramData\Docker\config",
            "/Users/alice",
            "/Users",
            "/System/Library",
            "/private/etc/hosts",
            "/Library",
        ] {
            assert!(sensitive(Path::new(bad)).is_some(), "{bad}");
        }
        for fine in [
            r"C:\Users\alice\data",
            "/Users/alice/project",
            "/var/lib/warden/sessions/1-aa/s/workspace",
        ] {
            assert_eq!(sensitive(Path::new(fine)), None, "{fine}");
        }
    }

    #[test]
    fn with_the_images_launcher_only_the_workspace_is_bound() {
        let owner = owner();
        let cfg = container_config(&ContainerPlan {
            image: "warden-sandbox:latest",
            user: (65534, 65534),
            owner: &owner,
            role: "session",
            launcher: None,
            workspace: WorkspaceSource::Host(Path::new(
                "/var/lib/warden/sessions/1-aa/s/workspace",
            )),
            grants: &[],
            empty_file: Path::new("/var/lib/warden/sessions/1-aa/empty"),
            memory_bytes: 2 << 30,
            pids_limit: 256,
            tmp_bytes: 64 << 20,
            network: NetworkMode::Deny,
            packages: None,
            runtime: None,
            mask_accounts: false,
            userns: None,
        });
        validate_container_config(&cfg, &no_sockets).unwrap();
        let mounts = cfg.host_config.as_ref().unwrap().mounts.clone().unwrap();
        assert_eq!(mounts.len(), 1, "{mounts:?}");
        assert_eq!(mounts[0].target.as_deref(), Some(WORKSPACE));
        assert_eq!(cfg.entrypoint, Some(vec![LAUNCHER_PATH.to_string()]));
    }

    #[test]
    fn grants_bind_exactly_the_object_at_its_own_path() {
        let cfg = good(&[
            BoundGrant {
                path: "/data/in".into(),
                access: Access::Read,
                hidden: Vec::new(),
            },
            BoundGrant {
                path: "/data/out.csv".into(),
                access: Access::Write,
                hidden: Vec::new(),
            },
        ]);
        validate_container_config(&cfg, &no_sockets).unwrap();
        let mounts = cfg.host_config.unwrap().mounts.unwrap();
        assert_eq!(mounts[2].source.as_deref(), Some("/data/in"));
        assert_eq!(mounts[2].target.as_deref(), Some("/data/in"));
        assert_eq!(mounts[2].read_only, Some(true));
        assert_eq!(mounts[3].read_only, Some(false));
        assert!(mounts.iter().all(|m| {
            m.bind_options
                .as_ref()
                .is_some_and(|b| b.non_recursive == Some(true))
        }));
    }

    #[test]
    fn what_a_grant_hides_is_covered_and_other_mounts_stay_out() {
        let cfg = good(&[BoundGrant {
            path: "/data/proj".into(),
            access: Access::Write,
            hidden: vec![
                ("/data/proj/.git".into(), MaskKind::Dir),
                ("/data/proj/lib/.git".into(), MaskKind::File),
            ],
        }]);
        validate_container_config(&cfg, &no_sockets).unwrap();
        let mounts = cfg.host_config.clone().unwrap().mounts.unwrap();
        assert_eq!(mounts.len(), 5, "{mounts:?}");
        let dir = &mounts[3];
        assert_eq!(dir.typ, Some(MountType::TMPFS));
        assert_eq!(dir.target.as_deref(), Some("/data/proj/.git"));
        assert_eq!(dir.read_only, Some(true));
        let file = &mounts[4];
        assert_eq!(file.typ, Some(MountType::BIND));
        assert_eq!(
            file.source.as_deref(),
            Some("/var/lib/warden/sessions/1-aa/empty")
        );
        assert_eq!(file.target.as_deref(), Some("/data/proj/lib/.git"));
        assert_eq!(file.read_only, Some(true));
        // A recursive bind would bring the source's submounts along: refused.
        let mut cfg = cfg;
        hc(&mut cfg).mounts.as_mut().unwrap()[2]
            .bind_options
            .as_mut()
            .unwrap()
            .non_recursive = None;
        assert!(
            refused(&cfg).contains("must not be recursive"),
            "{}",
            refused(&cfg)
        );
    }

    #[test]
    fn sockets_and_sensitive_host_paths_are_refused() {
        for path in [
            "/var/run/docker.sock",
            "/run/docker.sock",
            "/",
            "/etc",
            "/etc/ssl",
            "/proc",
            "/sys",
            "/dev",
            "/var/lib/docker",
            "/var/lib/docker/volumes/x",
            "/home",
            "/home/alice",
            "/root",
            "/var",
            "/srv/../etc",
            "relative/path",
        ] {
            let cfg = good(&[BoundGrant {
                path: path.into(),
                access: Access::Read,
                hidden: Vec::new(),
            }]);
            let why = refused(&cfg);
            assert!(why.contains("refused"), "{path}: {why}");
        }
        // A socket anywhere, told by the system.
        let cfg = good(&[BoundGrant {
            path: "/srv/app/control".into(),
            access: Access::Read,
            hidden: Vec::new(),
        }]);
        let err = validate_container_config(&cfg, &|p| p == Path::new("/srv/app/control"));
        assert!(err.unwrap_err().to_string().contains("socket"));
        // The same through the legacy `binds` field.
        let mut cfg = good(&[]);
        hc(&mut cfg).binds = Some(vec!["/var/run/docker.sock:/var/run/docker.sock".into()]);
        assert!(refused(&cfg).contains("socket"));
        // A directory inside a home directory, approved by its person, is fine.
        let cfg = good(&[BoundGrant {
            path: "/home/alice/data".into(),
            access: Access::Read,
            hidden: Vec::new(),
        }]);
        validate_container_config(&cfg, &no_sockets).unwrap();
    }

    #[test]
    fn privileges_and_shared_namespaces_are_refused() {
        type Spoil = Box<dyn Fn(&mut ContainerCreateBody)>;
        let cases: Vec<(&str, Spoil)> = vec![
            ("privileged", Box::new(|c| hc(c).privileged = Some(true))),
            (
                "cap_add",
                Box::new(|c| hc(c).cap_add = Some(vec!["SYS_ADMIN".into()])),
            ),
            ("cap_drop", Box::new(|c| hc(c).cap_drop = None)),
            ("nnp", Box::new(|c| hc(c).security_opt = None)),
            (
                "seccomp off",
                Box::new(|c| {
                    hc(c)
                        .security_opt
                        .as_mut()
                        .unwrap()
                        .push("seccomp=unconfined".into())
                }),
            ),
            (
                "host net",
                Box::new(|c| hc(c).network_mode = Some("host".into())),
            ),
            (
                "a bridge network",
                Box::new(|c| hc(c).network_mode = Some("bridge".into())),
            ),
            (
                "host pid",
                Box::new(|c| hc(c).pid_mode = Some("host".into())),
            ),
            (
                "host ipc",
                Box::new(|c| hc(c).ipc_mode = Some("host".into())),
            ),
            (
                "host uts",
                Box::new(|c| hc(c).uts_mode = Some("host".into())),
            ),
            (
                "container net",
                Box::new(|c| hc(c).network_mode = Some("container:abc".into())),
            ),
            ("root", Box::new(|c| c.user = Some("0:0".into()))),
            ("no user", Box::new(|c| c.user = None)),
            ("rw root", Box::new(|c| hc(c).readonly_rootfs = Some(false))),
            ("no memory", Box::new(|c| hc(c).memory = None)),
            ("more swap", Box::new(|c| hc(c).memory_swap = Some(-1))),
            ("no pids", Box::new(|c| hc(c).pids_limit = None)),
            ("no init", Box::new(|c| hc(c).init = Some(false))),
            ("logs", Box::new(|c| hc(c).log_config = None)),
            (
                "devices",
                Box::new(|c| hc(c).devices = Some(vec![Default::default()])),
            ),
            (
                "volumes_from",
                Box::new(|c| hc(c).volumes_from = Some(vec!["other".into()])),
            ),
            (
                "uncapped tmpfs",
                Box::new(|c| hc(c).tmpfs = Some(HashMap::from([("/tmp".into(), "rw".into())]))),
            ),
            ("no label", Box::new(|c| c.labels = None)),
        ];
        for (name, spoil) in cases {
            let mut cfg = good(&[]);
            spoil(&mut cfg);
            assert!(
                validate_container_config(&cfg, &no_sockets).is_err(),
                "{name} must be refused"
            );
        }
    }
}
