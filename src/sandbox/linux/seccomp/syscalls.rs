//! The system calls the seccomp filters name, with their numbers on each architecture
//! the filters are written for. The policy is written once, over [`Sys`]; each
//! architecture's filter is that policy numbered for it. aarch64 has only the generic
//! (`*at`, `clone`, `inotify_init1`) forms: what x86_64 also has in a legacy form is
//! `None` there, and [`Sys::generic_form`] names what stands for it.
//!
//! The numbers are checked against the `libc` crate at compile time for the architecture
//! being built (`cargo check --target aarch64-unknown-linux-gnu` checks the aarch64
//! column, as CI does); the few newer than `libc` are in the range every architecture
//! has numbered alike since Linux 5.1 (424 and up), which a unit test checks.

use super::arch::Arch;

macro_rules! syscalls {
    ($( $(#[$meta:meta])* $variant:ident = $name:literal, x86_64: $x:expr, aarch64: $a:expr; )*) => {
        /// A system call the filters name.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Sys {
            $( $(#[$meta])* $variant, )*
        }

        impl Sys {
            /// Every system call the filters may name.
            pub const ALL: &'static [Sys] = &[$(Sys::$variant),*];

            /// The kernel's name for it.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Sys::$variant => $name,)*
                }
            }

            /// Its number on `arch`, or `None` where that architecture does not have it.
            pub const fn number(self, arch: Arch) -> Option<i64> {
                match arch {
                    Arch::X86_64 => match self {
                        $(Sys::$variant => $x,)*
                    },
                    Arch::Aarch64 => match self {
                        $(Sys::$variant => $a,)*
                    },
                }
            }
        }
    };
}

syscalls! {
    // Sockets.
    Socket = "socket", x86_64: Some(41), aarch64: Some(198);
    Connect = "connect", x86_64: Some(42), aarch64: Some(203);
    Bind = "bind", x86_64: Some(49), aarch64: Some(200);
    Listen = "listen", x86_64: Some(50), aarch64: Some(201);
    Accept = "accept", x86_64: Some(43), aarch64: Some(202);
    Accept4 = "accept4", x86_64: Some(288), aarch64: Some(242);
    Socketpair = "socketpair", x86_64: Some(53), aarch64: Some(199);
    // Processes and sessions.
    Fork = "fork", x86_64: Some(57), aarch64: None;
    Vfork = "vfork", x86_64: Some(58), aarch64: None;
    Clone = "clone", x86_64: Some(56), aarch64: Some(220);
    Clone3 = "clone3", x86_64: Some(435), aarch64: Some(435);
    Execve = "execve", x86_64: Some(59), aarch64: Some(221);
    Execveat = "execveat", x86_64: Some(322), aarch64: Some(281);
    Setsid = "setsid", x86_64: Some(112), aarch64: Some(157);
    Setpgid = "setpgid", x86_64: Some(109), aarch64: Some(154);
    // Signals and other processes.
    Kill = "kill", x86_64: Some(62), aarch64: Some(129);
    Tkill = "tkill", x86_64: Some(200), aarch64: Some(130);
    Tgkill = "tgkill", x86_64: Some(234), aarch64: Some(131);
    RtSigqueueinfo = "rt_sigqueueinfo", x86_64: Some(129), aarch64: Some(138);
    RtTgsigqueueinfo = "rt_tgsigqueueinfo", x86_64: Some(297), aarch64: Some(240);
    PidfdOpen = "pidfd_open", x86_64: Some(434), aarch64: Some(434);
    PidfdSendSignal = "pidfd_send_signal", x86_64: Some(424), aarch64: Some(424);
    PidfdGetfd = "pidfd_getfd", x86_64: Some(438), aarch64: Some(438);
    Getpid = "getpid", x86_64: Some(39), aarch64: Some(172);
    // Limits, priority and scheduling.
    Prlimit64 = "prlimit64", x86_64: Some(302), aarch64: Some(261);
    SchedSetscheduler = "sched_setscheduler", x86_64: Some(144), aarch64: Some(119);
    SchedSetparam = "sched_setparam", x86_64: Some(142), aarch64: Some(118);
    SchedSetaffinity = "sched_setaffinity", x86_64: Some(203), aarch64: Some(122);
    SchedSetattr = "sched_setattr", x86_64: Some(314), aarch64: Some(274);
    Setpriority = "setpriority", x86_64: Some(141), aarch64: Some(140);
    IoprioSet = "ioprio_set", x86_64: Some(251), aarch64: Some(30);
    // File-system watches.
    InotifyInit = "inotify_init", x86_64: Some(253), aarch64: None;
    InotifyInit1 = "inotify_init1", x86_64: Some(294), aarch64: Some(26);
    InotifyAddWatch = "inotify_add_watch", x86_64: Some(254), aarch64: Some(27);
    InotifyRmWatch = "inotify_rm_watch", x86_64: Some(255), aarch64: Some(28);
    FanotifyInit = "fanotify_init", x86_64: Some(300), aarch64: Some(262);
    FanotifyMark = "fanotify_mark", x86_64: Some(301), aarch64: Some(263);
    // Descriptors.
    MemfdCreate = "memfd_create", x86_64: Some(319), aarch64: Some(279);
    // Memory mappings (the W^X seal where the kernel has no PR_SET_MDWE).
    Mmap = "mmap", x86_64: Some(9), aarch64: Some(222);
    Mprotect = "mprotect", x86_64: Some(10), aarch64: Some(226);
    PkeyMprotect = "pkey_mprotect", x86_64: Some(329), aarch64: Some(288);
    Fcntl = "fcntl", x86_64: Some(72), aarch64: Some(25);
    Ioctl = "ioctl", x86_64: Some(16), aarch64: Some(29);
    // Debugging, eBPF, perf.
    Ptrace = "ptrace", x86_64: Some(101), aarch64: Some(117);
    ProcessVmReadv = "process_vm_readv", x86_64: Some(310), aarch64: Some(270);
    ProcessVmWritev = "process_vm_writev", x86_64: Some(311), aarch64: Some(271);
    Kcmp = "kcmp", x86_64: Some(312), aarch64: Some(272);
    PerfEventOpen = "perf_event_open", x86_64: Some(298), aarch64: Some(241);
    Bpf = "bpf", x86_64: Some(321), aarch64: Some(280);
    Userfaultfd = "userfaultfd", x86_64: Some(323), aarch64: Some(282);
    // Kernel attack surface.
    Syslog = "syslog", x86_64: Some(103), aarch64: Some(116);
    Acct = "acct", x86_64: Some(163), aarch64: Some(89);
    Quotactl = "quotactl", x86_64: Some(179), aarch64: Some(60);
    QuotactlFd = "quotactl_fd", x86_64: Some(443), aarch64: Some(443);
    Uselib = "uselib", x86_64: Some(134), aarch64: None;
    ModifyLdt = "modify_ldt", x86_64: Some(154), aarch64: None;
    LookupDcookie = "lookup_dcookie", x86_64: Some(212), aarch64: Some(18);
    Vhangup = "vhangup", x86_64: Some(153), aarch64: Some(58);
    Personality = "personality", x86_64: Some(135), aarch64: Some(92);
    KexecLoad = "kexec_load", x86_64: Some(246), aarch64: Some(104);
    KexecFileLoad = "kexec_file_load", x86_64: Some(320), aarch64: Some(294);
    InitModule = "init_module", x86_64: Some(175), aarch64: Some(105);
    FinitModule = "finit_module", x86_64: Some(313), aarch64: Some(273);
    DeleteModule = "delete_module", x86_64: Some(176), aarch64: Some(106);
    Reboot = "reboot", x86_64: Some(169), aarch64: Some(142);
    Swapon = "swapon", x86_64: Some(167), aarch64: Some(224);
    Swapoff = "swapoff", x86_64: Some(168), aarch64: Some(225);
    Iopl = "iopl", x86_64: Some(172), aarch64: None;
    Ioperm = "ioperm", x86_64: Some(173), aarch64: None;
    Sethostname = "sethostname", x86_64: Some(170), aarch64: Some(161);
    Setdomainname = "setdomainname", x86_64: Some(171), aarch64: Some(162);
    Settimeofday = "settimeofday", x86_64: Some(164), aarch64: Some(170);
    ClockSettime = "clock_settime", x86_64: Some(227), aarch64: Some(112);
    ClockAdjtime = "clock_adjtime", x86_64: Some(305), aarch64: Some(266);
    Adjtimex = "adjtimex", x86_64: Some(159), aarch64: Some(171);
    NameToHandleAt = "name_to_handle_at", x86_64: Some(303), aarch64: Some(264);
    OpenByHandleAt = "open_by_handle_at", x86_64: Some(304), aarch64: Some(265);
    Statmount = "statmount", x86_64: Some(457), aarch64: Some(457);
    Listmount = "listmount", x86_64: Some(458), aarch64: Some(458);
    LsmSetSelfAttr = "lsm_set_self_attr", x86_64: Some(460), aarch64: Some(460);
    // Keyrings.
    AddKey = "add_key", x86_64: Some(248), aarch64: Some(217);
    Keyctl = "keyctl", x86_64: Some(250), aarch64: Some(219);
    RequestKey = "request_key", x86_64: Some(249), aarch64: Some(218);
    // NUMA memory policy.
    MovePages = "move_pages", x86_64: Some(279), aarch64: Some(239);
    Mbind = "mbind", x86_64: Some(237), aarch64: Some(235);
    MigratePages = "migrate_pages", x86_64: Some(256), aarch64: Some(238);
    SetMempolicy = "set_mempolicy", x86_64: Some(238), aarch64: Some(237);
    GetMempolicy = "get_mempolicy", x86_64: Some(239), aarch64: Some(236);
    // Namespaces and mounts.
    Unshare = "unshare", x86_64: Some(272), aarch64: Some(97);
    Setns = "setns", x86_64: Some(308), aarch64: Some(268);
    Mount = "mount", x86_64: Some(165), aarch64: Some(40);
    Umount2 = "umount2", x86_64: Some(166), aarch64: Some(39);
    PivotRoot = "pivot_root", x86_64: Some(155), aarch64: Some(41);
    Chroot = "chroot", x86_64: Some(161), aarch64: Some(51);
    OpenTree = "open_tree", x86_64: Some(428), aarch64: Some(428);
    OpenTreeAttr = "open_tree_attr", x86_64: Some(467), aarch64: Some(467);
    MoveMount = "move_mount", x86_64: Some(429), aarch64: Some(429);
    Fsopen = "fsopen", x86_64: Some(430), aarch64: Some(430);
    Fsconfig = "fsconfig", x86_64: Some(431), aarch64: Some(431);
    Fsmount = "fsmount", x86_64: Some(432), aarch64: Some(432);
    Fspick = "fspick", x86_64: Some(433), aarch64: Some(433);
    MountSetattr = "mount_setattr", x86_64: Some(442), aarch64: Some(442);
    // io_uring.
    IoUringSetup = "io_uring_setup", x86_64: Some(425), aarch64: Some(425);
    IoUringEnter = "io_uring_enter", x86_64: Some(426), aarch64: Some(426);
    IoUringRegister = "io_uring_register", x86_64: Some(427), aarch64: Some(427);
    // SysV and POSIX IPC.
    Shmget = "shmget", x86_64: Some(29), aarch64: Some(194);
    Shmat = "shmat", x86_64: Some(30), aarch64: Some(196);
    Shmctl = "shmctl", x86_64: Some(31), aarch64: Some(195);
    Shmdt = "shmdt", x86_64: Some(67), aarch64: Some(197);
    Msgget = "msgget", x86_64: Some(68), aarch64: Some(186);
    Msgsnd = "msgsnd", x86_64: Some(69), aarch64: Some(189);
    Msgrcv = "msgrcv", x86_64: Some(70), aarch64: Some(188);
    Msgctl = "msgctl", x86_64: Some(71), aarch64: Some(187);
    Semget = "semget", x86_64: Some(64), aarch64: Some(190);
    Semop = "semop", x86_64: Some(65), aarch64: Some(193);
    Semtimedop = "semtimedop", x86_64: Some(220), aarch64: Some(192);
    Semctl = "semctl", x86_64: Some(66), aarch64: Some(191);
    MqOpen = "mq_open", x86_64: Some(240), aarch64: Some(180);
    MqUnlink = "mq_unlink", x86_64: Some(241), aarch64: Some(181);
    MqTimedsend = "mq_timedsend", x86_64: Some(242), aarch64: Some(182);
    MqTimedreceive = "mq_timedreceive", x86_64: Some(243), aarch64: Some(183);
    MqNotify = "mq_notify", x86_64: Some(244), aarch64: Some(184);
    MqGetsetattr = "mq_getsetattr", x86_64: Some(245), aarch64: Some(185);
    // Ownership, modes and extended attributes.
    Chmod = "chmod", x86_64: Some(90), aarch64: None;
    Fchmodat = "fchmodat", x86_64: Some(268), aarch64: Some(53);
    Fchmodat2 = "fchmodat2", x86_64: Some(452), aarch64: Some(452);
    Chown = "chown", x86_64: Some(92), aarch64: None;
    Fchown = "fchown", x86_64: Some(93), aarch64: Some(55);
    Lchown = "lchown", x86_64: Some(94), aarch64: None;
    Fchownat = "fchownat", x86_64: Some(260), aarch64: Some(54);
    Setxattr = "setxattr", x86_64: Some(188), aarch64: Some(5);
    Lsetxattr = "lsetxattr", x86_64: Some(189), aarch64: Some(6);
    Fsetxattr = "fsetxattr", x86_64: Some(190), aarch64: Some(7);
    Removexattr = "removexattr", x86_64: Some(197), aarch64: Some(14);
    Lremovexattr = "lremovexattr", x86_64: Some(198), aarch64: Some(15);
    Fremovexattr = "fremovexattr", x86_64: Some(199), aarch64: Some(16);
    Setxattrat = "setxattrat", x86_64: Some(463), aarch64: Some(463);
    Removexattrat = "removexattrat", x86_64: Some(466), aarch64: Some(466);
    FileSetattr = "file_setattr", x86_64: Some(469), aarch64: Some(469);
    // What changes names, contents and modes in a file system (the journal's filter).
    Open = "open", x86_64: Some(2), aarch64: None;
    Openat = "openat", x86_64: Some(257), aarch64: Some(56);
    Creat = "creat", x86_64: Some(85), aarch64: None;
    Openat2 = "openat2", x86_64: Some(437), aarch64: Some(437);
    Truncate = "truncate", x86_64: Some(76), aarch64: Some(45);
    Fchmod = "fchmod", x86_64: Some(91), aarch64: Some(52);
    Unlink = "unlink", x86_64: Some(87), aarch64: None;
    Unlinkat = "unlinkat", x86_64: Some(263), aarch64: Some(35);
    Rmdir = "rmdir", x86_64: Some(84), aarch64: None;
    Rename = "rename", x86_64: Some(82), aarch64: None;
    Renameat = "renameat", x86_64: Some(264), aarch64: Some(38);
    Renameat2 = "renameat2", x86_64: Some(316), aarch64: Some(276);
    Mkdir = "mkdir", x86_64: Some(83), aarch64: None;
    Mkdirat = "mkdirat", x86_64: Some(258), aarch64: Some(34);
    Mknod = "mknod", x86_64: Some(133), aarch64: None;
    Mknodat = "mknodat", x86_64: Some(259), aarch64: Some(33);
    Symlink = "symlink", x86_64: Some(88), aarch64: None;
    Symlinkat = "symlinkat", x86_64: Some(266), aarch64: Some(36);
    Link = "link", x86_64: Some(86), aarch64: None;
    Linkat = "linkat", x86_64: Some(265), aarch64: Some(37);
    Utimensat = "utimensat", x86_64: Some(280), aarch64: Some(88);
}

impl Sys {
    /// For a legacy call that some architecture lacks, the general call that does the
    /// same there (and that the policy therefore also denies). `None` for x86-only
    /// hardware and compatibility interfaces, which have no counterpart at all.
    pub const fn generic_form(self) -> Option<Sys> {
        match self {
            Sys::Fork | Sys::Vfork => Some(Sys::Clone),
            Sys::Chmod => Some(Sys::Fchmodat),
            Sys::Chown | Sys::Lchown => Some(Sys::Fchownat),
            Sys::Open | Sys::Creat => Some(Sys::Openat),
            Sys::Unlink | Sys::Rmdir => Some(Sys::Unlinkat),
            Sys::Rename => Some(Sys::Renameat),
            Sys::Mkdir => Some(Sys::Mkdirat),
            Sys::Mknod => Some(Sys::Mknodat),
            Sys::Symlink => Some(Sys::Symlinkat),
            Sys::Link => Some(Sys::Linkat),
            Sys::InotifyInit => Some(Sys::InotifyInit1),
            _ => None,
        }
    }
}

/// The x86_64 column is the `libc` crate's for x86_64.
#[cfg(target_arch = "x86_64")]
const _: () = {
    const fn same(sys: Sys, libc_nr: i64) {
        match sys.number(Arch::X86_64) {
            Some(n) => assert!(n == libc_nr, "x86_64 syscall number differs from libc"),
            None => panic!("x86_64 syscall missing"),
        }
    }
    same(Sys::Socket, libc::SYS_socket);
    same(Sys::Connect, libc::SYS_connect);
    same(Sys::Bind, libc::SYS_bind);
    same(Sys::Listen, libc::SYS_listen);
    same(Sys::Accept, libc::SYS_accept);
    same(Sys::Accept4, libc::SYS_accept4);
    same(Sys::Socketpair, libc::SYS_socketpair);
    same(Sys::Fork, libc::SYS_fork);
    same(Sys::Vfork, libc::SYS_vfork);
    same(Sys::Clone, libc::SYS_clone);
    same(Sys::Clone3, libc::SYS_clone3);
    same(Sys::Execve, libc::SYS_execve);
    same(Sys::Execveat, libc::SYS_execveat);
    same(Sys::Setsid, libc::SYS_setsid);
    same(Sys::Setpgid, libc::SYS_setpgid);
    same(Sys::Kill, libc::SYS_kill);
    same(Sys::Tkill, libc::SYS_tkill);
    same(Sys::Tgkill, libc::SYS_tgkill);
    same(Sys::RtSigqueueinfo, libc::SYS_rt_sigqueueinfo);
    same(Sys::RtTgsigqueueinfo, libc::SYS_rt_tgsigqueueinfo);
    same(Sys::PidfdOpen, libc::SYS_pidfd_open);
    same(Sys::PidfdSendSignal, libc::SYS_pidfd_send_signal);
    same(Sys::PidfdGetfd, libc::SYS_pidfd_getfd);
    same(Sys::Getpid, libc::SYS_getpid);
    same(Sys::Prlimit64, libc::SYS_prlimit64);
    same(Sys::SchedSetscheduler, libc::SYS_sched_setscheduler);
    same(Sys::SchedSetparam, libc::SYS_sched_setparam);
    same(Sys::SchedSetaffinity, libc::SYS_sched_setaffinity);
    same(Sys::SchedSetattr, libc::SYS_sched_setattr);
    same(Sys::Setpriority, libc::SYS_setpriority);
    same(Sys::IoprioSet, libc::SYS_ioprio_set);
    same(Sys::InotifyInit, libc::SYS_inotify_init);
    same(Sys::InotifyInit1, libc::SYS_inotify_init1);
    same(Sys::InotifyAddWatch, libc::SYS_inotify_add_watch);
    same(Sys::InotifyRmWatch, libc::SYS_inotify_rm_watch);
    same(Sys::FanotifyInit, libc::SYS_fanotify_init);
    same(Sys::FanotifyMark, libc::SYS_fanotify_mark);
    same(Sys::MemfdCreate, libc::SYS_memfd_create);
    same(Sys::Mmap, libc::SYS_mmap);
    same(Sys::Mprotect, libc::SYS_mprotect);
    same(Sys::PkeyMprotect, libc::SYS_pkey_mprotect);
    same(Sys::Fcntl, libc::SYS_fcntl);
    same(Sys::Ioctl, libc::SYS_ioctl);
    same(Sys::Ptrace, libc::SYS_ptrace);
    same(Sys::ProcessVmReadv, libc::SYS_process_vm_readv);
    same(Sys::ProcessVmWritev, libc::SYS_process_vm_writev);
    same(Sys::Kcmp, libc::SYS_kcmp);
    same(Sys::PerfEventOpen, libc::SYS_perf_event_open);
    same(Sys::Bpf, libc::SYS_bpf);
    same(Sys::Userfaultfd, libc::SYS_userfaultfd);
    same(Sys::Syslog, libc::SYS_syslog);
    same(Sys::Acct, libc::SYS_acct);
    same(Sys::Quotactl, libc::SYS_quotactl);
    same(Sys::QuotactlFd, libc::SYS_quotactl_fd);
    same(Sys::Uselib, libc::SYS_uselib);
    same(Sys::ModifyLdt, libc::SYS_modify_ldt);
    same(Sys::LookupDcookie, libc::SYS_lookup_dcookie);
    same(Sys::Vhangup, libc::SYS_vhangup);
    same(Sys::Personality, libc::SYS_personality);
    same(Sys::KexecLoad, libc::SYS_kexec_load);
    same(Sys::KexecFileLoad, libc::SYS_kexec_file_load);
    same(Sys::InitModule, libc::SYS_init_module);
    same(Sys::FinitModule, libc::SYS_finit_module);
    same(Sys::DeleteModule, libc::SYS_delete_module);
    same(Sys::Reboot, libc::SYS_reboot);
    same(Sys::Swapon, libc::SYS_swapon);
    same(Sys::Swapoff, libc::SYS_swapoff);
    same(Sys::Iopl, libc::SYS_iopl);
    same(Sys::Ioperm, libc::SYS_ioperm);
    same(Sys::Sethostname, libc::SYS_sethostname);
    same(Sys::Setdomainname, libc::SYS_setdomainname);
    same(Sys::Settimeofday, libc::SYS_settimeofday);
    same(Sys::ClockSettime, libc::SYS_clock_settime);
    same(Sys::ClockAdjtime, libc::SYS_clock_adjtime);
    same(Sys::Adjtimex, libc::SYS_adjtimex);
    same(Sys::NameToHandleAt, libc::SYS_name_to_handle_at);
    same(Sys::OpenByHandleAt, libc::SYS_open_by_handle_at);
    same(Sys::AddKey, libc::SYS_add_key);
    same(Sys::Keyctl, libc::SYS_keyctl);
    same(Sys::RequestKey, libc::SYS_request_key);
    same(Sys::MovePages, libc::SYS_move_pages);
    same(Sys::Mbind, libc::SYS_mbind);
    same(Sys::MigratePages, libc::SYS_migrate_pages);
    same(Sys::SetMempolicy, libc::SYS_set_mempolicy);
    same(Sys::GetMempolicy, libc::SYS_get_mempolicy);
    same(Sys::Unshare, libc::SYS_unshare);
    same(Sys::Setns, libc::SYS_setns);
    same(Sys::Mount, libc::SYS_mount);
    same(Sys::Umount2, libc::SYS_umount2);
    same(Sys::PivotRoot, libc::SYS_pivot_root);
    same(Sys::Chroot, libc::SYS_chroot);
    same(Sys::OpenTree, libc::SYS_open_tree);
    same(Sys::MoveMount, libc::SYS_move_mount);
    same(Sys::Fsopen, libc::SYS_fsopen);
    same(Sys::Fsconfig, libc::SYS_fsconfig);
    same(Sys::Fsmount, libc::SYS_fsmount);
    same(Sys::Fspick, libc::SYS_fspick);
    same(Sys::MountSetattr, libc::SYS_mount_setattr);
    same(Sys::IoUringSetup, libc::SYS_io_uring_setup);
    same(Sys::IoUringEnter, libc::SYS_io_uring_enter);
    same(Sys::IoUringRegister, libc::SYS_io_uring_register);
    same(Sys::Shmget, libc::SYS_shmget);
    same(Sys::Shmat, libc::SYS_shmat);
    same(Sys::Shmctl, libc::SYS_shmctl);
    same(Sys::Shmdt, libc::SYS_shmdt);
    same(Sys::Msgget, libc::SYS_msgget);
    same(Sys::Msgsnd, libc::SYS_msgsnd);
    same(Sys::Msgrcv, libc::SYS_msgrcv);
    same(Sys::Msgctl, libc::SYS_msgctl);
    same(Sys::Semget, libc::SYS_semget);
    same(Sys::Semop, libc::SYS_semop);
    same(Sys::Semtimedop, libc::SYS_semtimedop);
    same(Sys::Semctl, libc::SYS_semctl);
    same(Sys::MqOpen, libc::SYS_mq_open);
    same(Sys::MqUnlink, libc::SYS_mq_unlink);
    same(Sys::MqTimedsend, libc::SYS_mq_timedsend);
    same(Sys::MqTimedreceive, libc::SYS_mq_timedreceive);
    same(Sys::MqNotify, libc::SYS_mq_notify);
    same(Sys::MqGetsetattr, libc::SYS_mq_getsetattr);
    same(Sys::Chmod, libc::SYS_chmod);
    same(Sys::Fchmodat, libc::SYS_fchmodat);
    same(Sys::Fchmodat2, libc::SYS_fchmodat2);
    same(Sys::Chown, libc::SYS_chown);
    same(Sys::Fchown, libc::SYS_fchown);
    same(Sys::Lchown, libc::SYS_lchown);
    same(Sys::Fchownat, libc::SYS_fchownat);
    same(Sys::Setxattr, libc::SYS_setxattr);
    same(Sys::Lsetxattr, libc::SYS_lsetxattr);
    same(Sys::Fsetxattr, libc::SYS_fsetxattr);
    same(Sys::Removexattr, libc::SYS_removexattr);
    same(Sys::Lremovexattr, libc::SYS_lremovexattr);
    same(Sys::Fremovexattr, libc::SYS_fremovexattr);
    same(Sys::Open, libc::SYS_open);
    same(Sys::Openat, libc::SYS_openat);
    same(Sys::Creat, libc::SYS_creat);
    same(Sys::Openat2, libc::SYS_openat2);
    same(Sys::Truncate, libc::SYS_truncate);
    same(Sys::Fchmod, libc::SYS_fchmod);
    same(Sys::Unlink, libc::SYS_unlink);
    same(Sys::Unlinkat, libc::SYS_unlinkat);
    same(Sys::Rmdir, libc::SYS_rmdir);
    same(Sys::Rename, libc::SYS_rename);
    same(Sys::Renameat, libc::SYS_renameat);
    same(Sys::Renameat2, libc::SYS_renameat2);
    same(Sys::Mkdir, libc::SYS_mkdir);
    same(Sys::Mkdirat, libc::SYS_mkdirat);
    same(Sys::Mknod, libc::SYS_mknod);
    same(Sys::Mknodat, libc::SYS_mknodat);
    same(Sys::Symlink, libc::SYS_symlink);
    same(Sys::Symlinkat, libc::SYS_symlinkat);
    same(Sys::Link, libc::SYS_link);
    same(Sys::Linkat, libc::SYS_linkat);
    same(Sys::Utimensat, libc::SYS_utimensat);
};

/// The aarch64 column is the `libc` crate's for aarch64.
#[cfg(target_arch = "aarch64")]
const _: () = {
    const fn same(sys: Sys, libc_nr: i64) {
        match sys.number(Arch::Aarch64) {
            Some(n) => assert!(n == libc_nr, "aarch64 syscall number differs from libc"),
            None => panic!("aarch64 syscall missing"),
        }
    }
    same(Sys::Socket, libc::SYS_socket);
    same(Sys::Connect, libc::SYS_connect);
    same(Sys::Bind, libc::SYS_bind);
    same(Sys::Listen, libc::SYS_listen);
    same(Sys::Accept, libc::SYS_accept);
    same(Sys::Accept4, libc::SYS_accept4);
    same(Sys::Socketpair, libc::SYS_socketpair);
    same(Sys::Clone, libc::SYS_clone);
    same(Sys::Clone3, libc::SYS_clone3);
    same(Sys::Execve, libc::SYS_execve);
    same(Sys::Execveat, libc::SYS_execveat);
    same(Sys::Setsid, libc::SYS_setsid);
    same(Sys::Setpgid, libc::SYS_setpgid);
    same(Sys::Kill, libc::SYS_kill);
    same(Sys::Tkill, libc::SYS_tkill);
    same(Sys::Tgkill, libc::SYS_tgkill);
    same(Sys::RtSigqueueinfo, libc::SYS_rt_sigqueueinfo);
    same(Sys::RtTgsigqueueinfo, libc::SYS_rt_tgsigqueueinfo);
    same(Sys::PidfdOpen, libc::SYS_pidfd_open);
    same(Sys::PidfdSendSignal, libc::SYS_pidfd_send_signal);
    same(Sys::PidfdGetfd, libc::SYS_pidfd_getfd);
    same(Sys::Getpid, libc::SYS_getpid);
    same(Sys::Prlimit64, libc::SYS_prlimit64);
    same(Sys::SchedSetscheduler, libc::SYS_sched_setscheduler);
    same(Sys::SchedSetparam, libc::SYS_sched_setparam);
    same(Sys::SchedSetaffinity, libc::SYS_sched_setaffinity);
    same(Sys::SchedSetattr, libc::SYS_sched_setattr);
    same(Sys::Setpriority, libc::SYS_setpriority);
    same(Sys::IoprioSet, libc::SYS_ioprio_set);
    same(Sys::InotifyInit1, libc::SYS_inotify_init1);
    same(Sys::InotifyAddWatch, libc::SYS_inotify_add_watch);
    same(Sys::InotifyRmWatch, libc::SYS_inotify_rm_watch);
    same(Sys::FanotifyInit, libc::SYS_fanotify_init);
    same(Sys::FanotifyMark, libc::SYS_fanotify_mark);
    same(Sys::MemfdCreate, libc::SYS_memfd_create);
    same(Sys::Mmap, libc::SYS_mmap);
    same(Sys::Mprotect, libc::SYS_mprotect);
    same(Sys::PkeyMprotect, libc::SYS_pkey_mprotect);
    same(Sys::Fcntl, libc::SYS_fcntl);
    same(Sys::Ioctl, libc::SYS_ioctl);
    same(Sys::Ptrace, libc::SYS_ptrace);
    same(Sys::ProcessVmReadv, libc::SYS_process_vm_readv);
    same(Sys::ProcessVmWritev, libc::SYS_process_vm_writev);
    same(Sys::Kcmp, libc::SYS_kcmp);
    same(Sys::PerfEventOpen, libc::SYS_perf_event_open);
    same(Sys::Bpf, libc::SYS_bpf);
    same(Sys::Userfaultfd, libc::SYS_userfaultfd);
    same(Sys::Syslog, libc::SYS_syslog);
    same(Sys::Acct, libc::SYS_acct);
    same(Sys::Quotactl, libc::SYS_quotactl);
    same(Sys::QuotactlFd, libc::SYS_quotactl_fd);
    same(Sys::LookupDcookie, libc::SYS_lookup_dcookie);
    same(Sys::Vhangup, libc::SYS_vhangup);
    same(Sys::Personality, libc::SYS_personality);
    same(Sys::KexecLoad, libc::SYS_kexec_load);
    same(Sys::KexecFileLoad, libc::SYS_kexec_file_load);
    same(Sys::InitModule, libc::SYS_init_module);
    same(Sys::FinitModule, libc::SYS_finit_module);
    same(Sys::DeleteModule, libc::SYS_delete_module);
    same(Sys::Reboot, libc::SYS_reboot);
    same(Sys::Swapon, libc::SYS_swapon);
    same(Sys::Swapoff, libc::SYS_swapoff);
    same(Sys::Sethostname, libc::SYS_sethostname);
    same(Sys::Setdomainname, libc::SYS_setdomainname);
    same(Sys::Settimeofday, libc::SYS_settimeofday);
    same(Sys::ClockSettime, libc::SYS_clock_settime);
    same(Sys::ClockAdjtime, libc::SYS_clock_adjtime);
    same(Sys::Adjtimex, libc::SYS_adjtimex);
    same(Sys::NameToHandleAt, libc::SYS_name_to_handle_at);
    same(Sys::OpenByHandleAt, libc::SYS_open_by_handle_at);
    same(Sys::AddKey, libc::SYS_add_key);
    same(Sys::Keyctl, libc::SYS_keyctl);
    same(Sys::RequestKey, libc::SYS_request_key);
    same(Sys::MovePages, libc::SYS_move_pages);
    same(Sys::Mbind, libc::SYS_mbind);
    same(Sys::MigratePages, libc::SYS_migrate_pages);
    same(Sys::SetMempolicy, libc::SYS_set_mempolicy);
    same(Sys::GetMempolicy, libc::SYS_get_mempolicy);
    same(Sys::Unshare, libc::SYS_unshare);
    same(Sys::Setns, libc::SYS_setns);
    same(Sys::Mount, libc::SYS_mount);
    same(Sys::Umount2, libc::SYS_umount2);
    same(Sys::PivotRoot, libc::SYS_pivot_root);
    same(Sys::Chroot, libc::SYS_chroot);
    same(Sys::OpenTree, libc::SYS_open_tree);
    same(Sys::MoveMount, libc::SYS_move_mount);
    same(Sys::Fsopen, libc::SYS_fsopen);
    same(Sys::Fsconfig, libc::SYS_fsconfig);
    same(Sys::Fsmount, libc::SYS_fsmount);
    same(Sys::Fspick, libc::SYS_fspick);
    same(Sys::MountSetattr, libc::SYS_mount_setattr);
    same(Sys::IoUringSetup, libc::SYS_io_uring_setup);
    same(Sys::IoUringEnter, libc::SYS_io_uring_enter);
    same(Sys::IoUringRegister, libc::SYS_io_uring_register);
    same(Sys::Shmget, libc::SYS_shmget);
    same(Sys::Shmat, libc::SYS_shmat);
    same(Sys::Shmctl, libc::SYS_shmctl);
    same(Sys::Shmdt, libc::SYS_shmdt);
    same(Sys::Msgget, libc::SYS_msgget);
    same(Sys::Msgsnd, libc::SYS_msgsnd);
    same(Sys::Msgrcv, libc::SYS_msgrcv);
    same(Sys::Msgctl, libc::SYS_msgctl);
    same(Sys::Semget, libc::SYS_semget);
    same(Sys::Semop, libc::SYS_semop);
    same(Sys::Semtimedop, libc::SYS_semtimedop);
    same(Sys::Semctl, libc::SYS_semctl);
    same(Sys::MqOpen, libc::SYS_mq_open);
    same(Sys::MqUnlink, libc::SYS_mq_unlink);
    same(Sys::MqTimedsend, libc::SYS_mq_timedsend);
    same(Sys::MqTimedreceive, libc::SYS_mq_timedreceive);
    same(Sys::MqNotify, libc::SYS_mq_notify);
    same(Sys::MqGetsetattr, libc::SYS_mq_getsetattr);
    same(Sys::Fchmodat, libc::SYS_fchmodat);
    same(Sys::Fchown, libc::SYS_fchown);
    same(Sys::Fchownat, libc::SYS_fchownat);
    same(Sys::Setxattr, libc::SYS_setxattr);
    same(Sys::Lsetxattr, libc::SYS_lsetxattr);
    same(Sys::Fsetxattr, libc::SYS_fsetxattr);
    same(Sys::Removexattr, libc::SYS_removexattr);
    same(Sys::Lremovexattr, libc::SYS_lremovexattr);
    same(Sys::Fremovexattr, libc::SYS_fremovexattr);
    same(Sys::Openat, libc::SYS_openat);
    same(Sys::Openat2, libc::SYS_openat2);
    same(Sys::Truncate, libc::SYS_truncate);
    same(Sys::Fchmod, libc::SYS_fchmod);
    same(Sys::Unlinkat, libc::SYS_unlinkat);
    same(Sys::Renameat, libc::SYS_renameat);
    same(Sys::Renameat2, libc::SYS_renameat2);
    same(Sys::Mkdirat, libc::SYS_mkdirat);
    same(Sys::Mknodat, libc::SYS_mknodat);
    same(Sys::Symlinkat, libc::SYS_symlinkat);
    same(Sys::Linkat, libc::SYS_linkat);
    same(Sys::Utimensat, libc::SYS_utimensat);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newer_calls_share_one_number_on_every_architecture() {
        for sys in Sys::ALL {
            if let (Some(x), Some(a)) = (sys.number(Arch::X86_64), sys.number(Arch::Aarch64))
                && (x >= 424 || a >= 424)
            {
                assert_eq!(x, a, "{}", sys.name());
            }
        }
    }

    #[test]
    fn aarch64_lacks_exactly_the_legacy_and_x86_only_calls() {
        let missing: Vec<&str> = Sys::ALL
            .iter()
            .filter(|s| s.number(Arch::Aarch64).is_none())
            .map(|s| s.name())
            .collect();
        assert_eq!(
            missing,
            [
                "fork",
                "vfork",
                "inotify_init",
                "uselib",
                "modify_ldt",
                "iopl",
                "ioperm",
                "chmod",
                "chown",
                "lchown",
                "open",
                "creat",
                "unlink",
                "rmdir",
                "rename",
                "mkdir",
                "mknod",
                "symlink",
                "link"
            ]
        );
        for sys in Sys::ALL {
            assert!(sys.number(Arch::X86_64).is_some(), "{}", sys.name());
            if let Some(generic) = sys.generic_form() {
                assert!(generic.number(Arch::Aarch64).is_some(), "{}", sys.name());
            }
        }
    }

    #[test]
    fn numbers_are_unique_per_architecture_and_reviewed() {
        for arch in [Arch::X86_64, Arch::Aarch64] {
            let mut seen = std::collections::BTreeMap::new();
            for sys in Sys::ALL {
                if let Some(n) = sys.number(arch) {
                    assert!(
                        n >= 0 && n <= i64::from(arch.max_reviewed_syscall()),
                        "{}",
                        sys.name()
                    );
                    if let Some(other) = seen.insert(n, sys.name()) {
                        panic!("{arch:?}: {} and {other} share {n}", sys.name());
                    }
                }
            }
        }
    }
}
