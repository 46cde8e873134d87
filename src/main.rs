//! The warden command line: `serve` (MCP over stdio), `run` (one execution, for trying the
//! sandbox by hand) and the hidden helper stage the server re-executes for each worker.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use rmcp::ServiceExt;
use warden::config::{ConfigFile, Settings};
use warden::execution::ExecuteArgs;
use warden::server::WardenServer;
use warden::session::{PreApproval, SessionManager};

/// The version and the commit it was built from (`build.rs`).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("BUILT_FROM_COMMIT"),
    ")"
);

#[derive(Parser)]
#[command(
    name = "warden",
    version = VERSION,
    about = "An MCP server that runs Python in a sandbox",
    after_help = "Every setting, with its default: `warden serve --help` or `warden settings`."
)]
struct Cli {
    /// Set a setting for this run (repeatable), e.g. --set SANDBOX_TIMEOUT_S=30; stronger
    /// than the environment and the config file.
    #[arg(long = "set", value_name = "NAME=VALUE", global = true)]
    set: Vec<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve MCP over stdio (what an MCP client launches), or over streamable HTTP at
    /// `/mcp` with `--http`.
    #[command(after_help = warden::config::help_text())]
    Serve {
        /// Pre-approve read access to paths for every session (repeatable; one flag may
        /// name several, or none). Use this when the MCP client cannot ask you for
        /// consent.
        #[arg(long = "allow-read", value_name = "PATH", num_args = 0..)]
        allow_read: Vec<String>,
        /// Pre-approve read and write access to paths for every session (as
        /// --allow-read).
        #[arg(long = "allow-write", value_name = "PATH", num_args = 0..)]
        allow_write: Vec<String>,
        /// Pre-approve a host for every session's egress proxy (repeatable): `host`,
        /// `host:port` or `*.suffix`, as in SANDBOX_EGRESS_ALLOW. Needs
        /// HOST_SANDBOX_NETWORK=proxy (or allow).
        #[arg(long = "allow-host", value_name = "HOST")]
        allow_host: Vec<String>,
        /// Serve MCP over streamable HTTP at http://ADDR/mcp instead of stdio (ADDR
        /// defaults to SANDBOX_HTTP_ADDR, 127.0.0.1:8765). Over TCP every client must send
        /// the bearer token (SANDBOX_HTTP_TOKEN, else the data directory's http-token
        /// file, generated at the first start). `unix:PATH` serves on a UNIX socket
        /// (mode 0600) to processes of this uid only, without a token.
        #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "")]
        http: Option<String>,
    },
    /// Run one file (or - for stdin) in a fresh sandboxed session and print the result
    /// as JSON.
    Run {
        file: PathBuf,
        /// Wall-clock limit in seconds (fractions allowed).
        #[arg(long, value_parser = parse_seconds)]
        timeout_s: Option<f64>,
    },
    /// Check files with the static guard only (nothing runs). Exits 1 when anything is
    /// blocked.
    Check {
        files: Vec<PathBuf>,
        /// JSON verdicts, one object per file.
        #[arg(long)]
        json: bool,
        /// The policy to check against: strict, default, data-science or a policy
        /// file's path (default: SANDBOX_POLICY).
        #[arg(long, value_name = "NAME", value_parser = parse_policy)]
        policy: Option<warden::guard::PolicyChoice>,
    },
    /// Verify every record of the audit log (default: the data directory's `audit/`; or
    /// one segment file). Exits 1 and names the first bad record if anything is broken.
    AuditVerify { path: Option<PathBuf> },
    /// Show every setting: its value, where the value came from, and its default.
    Settings {
        /// The README's Markdown table of every setting instead.
        #[arg(long)]
        markdown: bool,
    },
    /// Prove by live probes what the sandbox enforces here (JSON on stdout). Exits
    /// non-zero when a required probe is not blocked.
    Selftest {
        /// A readable table instead of JSON.
        #[arg(long)]
        human: bool,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions { shell: clap_complete::Shell },
    /// Print the manual page (roff), e.g. `warden man > warden.1`.
    Man,
}

fn main() -> ExitCode {
    // The helper and the workspace keeper must stay single-threaded: dispatch before any
    // runtime exists.
    #[cfg(unix)]
    match std::env::args_os().nth(1) {
        Some(a) if a == warden::worker::helper::HELPER_SUBCOMMAND => {
            warden::sandbox::run_helper_main()
        }
        #[cfg(target_os = "linux")]
        Some(a) if a == warden::sandbox::linux::keeper::KEEPER_SUBCOMMAND => {
            warden::sandbox::linux::keeper::run_keeper_main()
        }
        _ => {}
    }
    // Inside a Docker backend container: the launcher and the image query.
    #[cfg(all(feature = "docker", target_os = "linux"))]
    {
        use warden::backend::docker::launcher;
        match std::env::args_os().nth(1) {
            Some(a) if a == launcher::LAUNCHER_SUBCOMMAND => launcher::run_launcher_main(),
            Some(a) if a == launcher::QUERY_SUBCOMMAND => launcher::run_query_main(),
            _ => {}
        }
    }
    // What tools/build-image.sh --launcher labels an image with.
    #[cfg(feature = "docker")]
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == warden::backend::docker::route::PROTOCOL_SUBCOMMAND)
    {
        println!("{}", warden::backend::docker::route::protocol_line());
        return ExitCode::SUCCESS;
    }
    harden_server_process();
    // Best effort: only speed depends on it.
    let _ = warden::os::keep_freed_memory_for_reuse();
    match real_main() {
        Ok(code) => code,
        Err(e) => {
            // The whole chain on one line, no backtrace: this is what a user (or an MCP
            // client's log) sees when warden cannot start.
            eprintln!("warden: error: {}", render_error(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, skipping a cause whose text the line already
/// holds (many messages quote their source).
fn render_error(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

fn real_main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    // Generated from the command definitions; no setting is read.
    match &cli.command {
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(*shell, &mut command, "warden", &mut std::io::stdout());
            return Ok(ExitCode::SUCCESS);
        }
        Command::Man => {
            let command = <Cli as clap::CommandFactory>::command();
            clap_mangen::Man::new(command)
                .render(&mut std::io::stdout())
                .context("writing the manual page")?;
            return Ok(ExitCode::SUCCESS);
        }
        _ => {}
    }
    let (settings, config, misspelt) = warden::config::load(&cli.set, std::env::vars())?;
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // A log line that cannot be written (stderr a file past the file size limit, a
        // full disk) is lost, never a panic in the task that logged it.
        .log_internal_errors(false)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(&settings.log_filter)
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    for name in misspelt {
        tracing::warn!(
            "{name} is set in the environment but is not a warden setting (see `warden settings`)"
        );
    }
    let mut settings = settings;
    if let Command::Serve { allow_host, .. } = &cli.command
        && !allow_host.is_empty()
    {
        settings.egress.rules = settings
            .egress
            .rules
            .with_allowed(allow_host)
            .context("--allow-host")?;
    }
    let settings = Arc::new(settings);
    match &cli.command {
        Command::Check {
            files,
            json,
            policy,
        } => {
            let policy = policy.as_ref().unwrap_or(&settings.policy);
            return check_files(policy, files, *json);
        }
        Command::AuditVerify { path } => return audit_verify(&settings, path.clone()),
        Command::Settings { markdown } => {
            show_settings(&settings, *markdown)?;
            return Ok(ExitCode::SUCCESS);
        }
        _ => {}
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let outcome = runtime.block_on(async move {
        match cli.command {
            Command::Serve {
                allow_read,
                allow_write,
                http,
                ..
            } => {
                let pre = pre_approvals(&allow_read, &allow_write, &config);
                let transport = match http {
                    None => Transport::Stdio,
                    Some(addr) if addr.trim().is_empty() => {
                        Transport::Http(settings.http_addr.clone())
                    }
                    Some(addr) => Transport::Http(
                        warden::config::HttpBind::parse(&addr)
                            .map_err(anyhow::Error::msg)
                            .context("--http")?,
                    ),
                };
                serve(settings, pre, transport)
                    .await
                    .map(|()| ExitCode::SUCCESS)
            }
            Command::Run { file, timeout_s } => run_once(settings, file, timeout_s)
                .await
                .map(|()| ExitCode::SUCCESS),
            Command::Selftest { human } => selftest(settings, human).await,
            Command::Check { .. }
            | Command::AuditVerify { .. }
            | Command::Settings { .. }
            | Command::Completions { .. }
            | Command::Man => Ok(ExitCode::SUCCESS),
        }
    });
    // Whatever is still blocked (a stdin read) must not keep the process alive.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    outcome
}

/// The server itself holds secrets (its environment) and talks to root-equivalent
/// resources: no core dumps, and (Linux) not readable through /proc by same-uid
/// processes. A file size limit must fail a write (the audit record's, and then the call)
/// rather than kill the server: SIGXFSZ is ignored, as Python itself does.
fn harden_server_process() {
    #[cfg(unix)]
    {
        use rustix::process::{Resource, Rlimit, setrlimit};
        // SAFETY: setting a signal's disposition to SIG_IGN, before any thread exists.
        unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
        let none = Rlimit {
            current: Some(0),
            maximum: Some(0),
        };
        let _ = setrlimit(Resource::Core, none);
    }
    #[cfg(target_os = "linux")]
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
}

/// Grants the operator approved before start: CLI flags and the config file.
fn pre_approvals(
    allow_read: &[String],
    allow_write: &[String],
    config: &ConfigFile,
) -> Vec<PreApproval> {
    use warden::grants::Access;
    let mut out: Vec<PreApproval> = Vec::new();
    for (paths, access, flag) in [
        (allow_read, Access::Read, "--allow-read"),
        (allow_write, Access::Write, "--allow-write"),
    ] {
        out.extend(paths.iter().map(|p| PreApproval {
            path: p.clone(),
            access,
            source: flag.to_string(),
        }));
    }
    if let Some(file) = &config.path {
        out.extend(config.grants.iter().map(|g| PreApproval {
            path: g.path.clone(),
            access: g.access,
            source: format!("config file {}", file.display()),
        }));
    }
    out
}

/// `warden settings`: each setting's value and origin, or the README's table.
fn show_settings(settings: &Settings, markdown: bool) -> anyhow::Result<()> {
    if markdown {
        print!("{}", warden::config::markdown_table());
        return Ok(());
    }
    for row in settings.document() {
        let value = match (&row["value"], &row["default"]["computed"]) {
            (serde_json::Value::String(v), _) => v.clone(),
            (_, serde_json::Value::String(how)) => format!("<{}>", how.replace('`', "")),
            _ => String::new(),
        };
        let origin = row["origin"].as_str().unwrap_or_default().replace('_', " ");
        println!(
            "{:<24} {value}   [{origin}]",
            row["name"].as_str().unwrap_or_default()
        );
    }
    Ok(())
}

/// Where `serve` talks MCP.
enum Transport {
    Stdio,
    Http(warden::config::HttpBind),
}

async fn serve(
    settings: Arc<Settings>,
    pre: Vec<PreApproval>,
    transport: Transport,
) -> anyhow::Result<()> {
    if settings.host_sandbox == warden::config::SandboxMode::Off {
        tracing::warn!(
            "HOST_SANDBOX=off: code will run WITHOUT the operating-system sandbox (development only)"
        );
    }
    let require = settings.host_sandbox == warden::config::SandboxMode::Require;
    let sessions = Arc::new(
        SessionManager::new(settings.clone(), &pre)
            .await
            .context("cannot prepare sessions")?,
    );
    let server = WardenServer::new(sessions.clone());
    if require {
        // Fail closed: under require, code runs only if every required probe is blocked.
        let report = warden::selftest::run(&sessions).await;
        let failing = warden::selftest::report::gate_reason(&report);
        if let Some(reason) = failing {
            tracing::error!(%reason, "HOST_SANDBOX=require: refusing to run code");
            sessions.close_gate(reason);
        }
        server.remember_selftest(report);
    }
    // Warm workers and idle expiry, once the gate is decided.
    sessions.start_background();
    let watcher = tokio::spawn(exit_on_signal(sessions.clone()));
    let outcome = match transport {
        Transport::Stdio => serve_stdio(server.on_stdio()).await,
        Transport::Http(addr) => serve_http(server, &settings, addr).await,
    };
    watcher.abort();
    sessions.shutdown().await;
    #[cfg(unix)]
    remove_socket();
    outcome
}

async fn serve_stdio(server: WardenServer) -> anyhow::Result<()> {
    if let Some(size) = warden::os::enlarge_stdout_pipe() {
        tracing::debug!(size, "stdout is a pipe");
    }
    // Non-blocking pipes on the runtime's reactor when the client gave us pipes (the
    // usual case; anything else falls back to the blocking handles): no hand-off to a
    // blocking thread, and no copy of each message into its buffer, per read and write.
    match server.serve(rmcp::transport::stdio_pipes()).await {
        Ok(running) => running
            .waiting()
            .await
            .map(|_| ())
            .context("MCP service failed"),
        // A client that goes away before initialising is no reason to leave anything
        // behind: the instance directory is removed by the caller all the same.
        Err(e) => Err(anyhow::Error::new(e).context("MCP initialisation failed")),
    }
}

/// The data directory: `SANDBOX_DATA_DIR`, else the platform's.
fn data_dir(settings: &Settings) -> Option<PathBuf> {
    settings
        .data_dir
        .clone()
        .or_else(|| warden::config::default_data_dir(warden::os::running_as_root()))
}

/// Serves HTTP until a signal ends the process (see [`exit_on_signal`]). What a person
/// starting it needs (the URL, and a token generated now) goes to stderr whatever the
/// log level.
async fn serve_http(
    server: WardenServer,
    settings: &Settings,
    bind: warden::config::HttpBind,
) -> anyhow::Result<()> {
    use warden::config::HttpBind;
    use warden::server::http;
    let (listener, tcp, token) = match bind {
        HttpBind::Tcp(addr) => {
            let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
                format!("cannot listen on {addr} (SANDBOX_HTTP_ADDR or --http)")
            })?;
            let bound = listener.local_addr().context("no local address")?;
            if settings.http_allowed_hosts.is_empty() && bound.ip().is_unspecified() {
                tracing::warn!(
                    "listening on {bound}: clients must reach it by a name or address listed in \
                     SANDBOX_HTTP_ALLOWED_HOSTS (loopback names are accepted); other Host headers are refused"
                );
            }
            eprintln!(
                "warden: MCP over streamable HTTP at http://{bound}{}",
                http::MCP_PATH
            );
            let token = http_token(settings)?;
            (http::HttpListener::Tcp(listener), Some(bound), Some(token))
        }
        HttpBind::Unix(path) => {
            let token = settings.http_token.clone();
            (unix_listener(&path, token.is_some())?, None, token)
        }
    };
    let options = http::HttpOptions {
        tcp,
        token,
        extra_hosts: settings.http_allowed_hosts.clone(),
        extra_origins: settings.http_allowed_origins.clone(),
    };
    // No graceful drain: a signal kills the workers of calls in flight and ends the
    // process (a drain would wait for every call).
    http::serve(server, options, listener, std::future::pending())
        .await
        .context("the HTTP server failed")
}

/// The token TCP clients must send: the configured one, else the token file's (made now,
/// and then printed, the one time it is shown).
fn http_token(settings: &Settings) -> anyhow::Result<String> {
    if let Some(token) = &settings.http_token {
        eprintln!("warden: clients must send the SANDBOX_HTTP_TOKEN bearer token");
        return Ok(token.clone());
    }
    let dir = data_dir(settings).context("no data directory for the HTTP token file")?;
    let stored = warden::server::auth::load_or_create_token(&dir)?;
    if let Some(why) = &stored.replaced {
        eprintln!(
            "warden: the old token file could not be trusted ({why}); clients need the new token"
        );
    }
    if stored.created {
        eprintln!(
            "warden: bearer token (generated; saved mode 0600 in {}; send it as \
             `Authorization: Bearer <token>`): {}",
            stored.path.display(),
            stored.token
        );
    } else {
        eprintln!(
            "warden: clients must send the bearer token saved in {}",
            stored.path.display()
        );
    }
    Ok(stored.token)
}

/// The UNIX socket this server bound (path, device, inode), removed at exit if it is
/// still that socket.
#[cfg(unix)]
static SOCKET: std::sync::OnceLock<(PathBuf, u64, u64)> = std::sync::OnceLock::new();

#[cfg(unix)]
fn remove_socket() {
    use std::os::unix::fs::MetadataExt;
    if let Some((path, dev, ino)) = SOCKET.get()
        && std::fs::symlink_metadata(path).is_ok_and(|m| m.dev() == *dev && m.ino() == *ino)
    {
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(unix)]
fn unix_listener(
    path: &std::path::Path,
    token: bool,
) -> anyhow::Result<warden::server::http::HttpListener> {
    use std::os::unix::fs::MetadataExt;
    let listener = warden::server::auth::bind_private_socket(path)?;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        let _ = SOCKET.set((path.to_path_buf(), meta.dev(), meta.ino()));
    }
    listener
        .set_nonblocking(true)
        .context("cannot make the socket non-blocking")?;
    let listener =
        tokio::net::UnixListener::from_std(listener).context("cannot serve the UNIX socket")?;
    eprintln!(
        "warden: MCP over streamable HTTP at http://localhost{} on the UNIX socket {} \
         (mode 0600; processes of uid {} only; {})",
        warden::server::http::MCP_PATH,
        path.display(),
        rustix::process::geteuid().as_raw(),
        if token {
            "they must send the SANDBOX_HTTP_TOKEN bearer token too"
        } else {
            "no token needed"
        }
    );
    Ok(warden::server::http::HttpListener::Unix(listener))
}

#[cfg(not(unix))]
fn unix_listener(
    path: &std::path::Path,
    _token: bool,
) -> anyhow::Result<warden::server::http::HttpListener> {
    anyhow::bail!(
        "--http unix:{}: UNIX sockets need a Unix system; use IP:PORT with the bearer token",
        path.display()
    )
}

#[cfg(not(unix))]
async fn shutdown_signal() -> &'static str {
    if tokio::signal::ctrl_c().await.is_err() {
        return std::future::pending().await;
    }
    "Ctrl-C"
}

/// The first of SIGTERM, SIGINT and SIGHUP, by name.
#[cfg(unix)]
async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        tracing::error!("cannot install signal handlers; SIGTERM ends warden without clean-up");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
        _ = hup.recv() => "SIGHUP",
    }
}

/// On SIGTERM, SIGINT or SIGHUP: kill every worker (calls in flight included), remove
/// every workspace, checkpoint the audit log, and exit — within a second, whatever the
/// transport is doing (a blocked stdin read, an HTTP request in flight). A second signal,
/// or a clean-up that overruns, ends the process at once; the workers die with it (their
/// parent-death signal) and the keeper's workspaces with the keeper.
async fn exit_on_signal(sessions: Arc<SessionManager>) {
    let name = shutdown_signal().await;
    tracing::info!(signal = name, "shutting down");
    tokio::select! {
        () = sessions.shutdown() => {}
        second = shutdown_signal() => tracing::warn!(signal = second, "second signal: exiting now"),
        () = tokio::time::sleep(std::time::Duration::from_millis(800)) => {
            tracing::warn!("the clean-up overran; exiting now");
        }
    }
    #[cfg(unix)]
    remove_socket();
    std::process::exit(0);
}

/// `warden audit-verify [PATH]`: checks every record; exit 0 only when the whole log is
/// one unbroken chain, 1 when anything was ever broken (each finding is printed).
fn audit_verify(settings: &Settings, path: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let path = match path {
        Some(p) => p,
        None => data_dir(settings)
            .context("no data directory; give the audit directory's path")?
            .join("audit"),
    };
    if path.is_file() {
        let key_dir = path
            .parent()
            .context("the segment's directory holds the key")?;
        let (records, first_bad) = warden::audit::verify_file(&path, key_dir)?;
        return Ok(match first_bad {
            None => {
                println!("{}: {records} records, every one verifies", path.display());
                ExitCode::SUCCESS
            }
            Some(bad) => {
                println!("{}: BROKEN at {bad}", path.display());
                ExitCode::from(1)
            }
        });
    }
    let report = warden::audit::verify_dir(&path)?;
    println!(
        "audit log {}: {} records in {} segment(s)",
        path.display(),
        report.records,
        report.segments.len()
    );
    if let Some(bad) = &report.first_bad {
        println!("  BROKEN: first bad record: {bad}");
    }
    for b in &report.recorded_breaks {
        println!("  recorded break at {b}");
    }
    for (name, first_bad) in &report.set_aside {
        match first_bad {
            Some(bad) => println!("  set aside: {name}: first bad record: {bad}"),
            None => println!("  set aside: {name}: its records verify on their own"),
        }
    }
    if let Some(torn) = &report.torn_tail {
        println!("  {torn} (a writer stopped mid-write; cut at the next start)");
    }
    if report.clean() {
        println!("  every record verifies and the chain is unbroken");
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(1))
    }
}

fn check_files(
    policy: &warden::guard::PolicyChoice,
    files: &[PathBuf],
    json: bool,
) -> anyhow::Result<ExitCode> {
    use warden::guard::{CheckContext, Decision};
    let guard = policy
        .guard()
        .with_context(|| format!("cannot load the guard policy `{policy}`"))?;
    let ctx = CheckContext {
        workspace: std::env::current_dir().context("no current directory")?,
        allowed_roots: Vec::new(),
    };
    let mut blocked = false;
    let mut verdicts = Vec::new();
    for file in files {
        let source =
            std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
        let verdict = guard.check(&source, &ctx);
        blocked |= verdict.decision == Decision::Blocked;
        if json {
            verdicts.push(serde_json::json!({"file": file, "verdict": verdict}));
        } else {
            print!(
                "{}",
                warden::guard::render_human(&file.display().to_string(), &verdict)
            );
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&verdicts)?);
    }
    Ok(if blocked {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

async fn selftest(settings: Arc<Settings>, human: bool) -> anyhow::Result<ExitCode> {
    let sessions = Arc::new(
        SessionManager::new(settings, &[])
            .await
            .context("cannot prepare sessions")?,
    );
    let watcher = tokio::spawn(exit_on_signal(sessions.clone()));
    let report = warden::selftest::run(&sessions).await;
    watcher.abort();
    sessions.shutdown().await;
    if human {
        print!("{}", warden::selftest::report::render_human(&report));
    } else {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(
        if warden::selftest::report::gate_reason(&report).is_some() {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        },
    )
}

fn parse_policy(text: &str) -> Result<warden::guard::PolicyChoice, String> {
    warden::guard::PolicyChoice::parse(text).ok_or_else(|| {
        format!(
            "name a policy: {} or the path of a policy file",
            warden::guard::Tier::names()
        )
    })
}

fn parse_seconds(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    warden::execution::check_seconds(value)
}

async fn run_once(
    settings: Arc<Settings>,
    file: PathBuf,
    timeout_s: Option<f64>,
) -> anyhow::Result<()> {
    let code = if file.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s)?;
        s
    } else {
        std::fs::read_to_string(&file).with_context(|| format!("cannot read {}", file.display()))?
    };
    let sessions = Arc::new(
        SessionManager::new(settings, &[])
            .await
            .context("cannot prepare sessions")?,
    );
    let watcher = tokio::spawn(exit_on_signal(sessions.clone()));
    let result = sessions
        .execute(
            &warden::owner::Owner::Local,
            &ExecuteArgs {
                code,
                session: Some("run".into()),
                timeout_s,
                inputs: None,
                task_limit: None,
                transactional: None,
            },
        )
        .await;
    watcher.abort();
    sessions.shutdown().await;
    println!("{}", serde_json::to_string_pretty(&result)?);
    Ok(())
}
