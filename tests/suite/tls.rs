//! Certificates and a TLS endpoint for engines under test: a CA, certificates it signs,
//! and a TLS terminator on loopback in front of the local engine's socket. Shared by the
//! tests and the benches (`#[path]`), so it names nothing of either.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

/// Runs `openssl` with `args` in `dir`.
pub fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl (Debian's openssl package)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA (`<ca>.pem`, `<ca>-key.pem`) made in `dir`.
pub fn make_ca(dir: &std::path::Path, ca: &str) {
    let (cert, key) = (format!("{ca}.pem"), format!("{ca}-key.pem"));
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            &format!("/CN={ca}"),
            "-keyout",
            &key,
            "-out",
            &cert,
        ],
    );
}

/// A certificate `<name>.pem` with key `<name>-key.pem`, signed by `ca`, for `usage`
/// (`serverAuth` for 127.0.0.1, or `clientAuth`).
pub fn make_cert(dir: &std::path::Path, ca: &str, name: &str, usage: &str) {
    make_cert_for(dir, ca, name, usage, "127.0.0.1");
}

/// The same, a `serverAuth` certificate naming the addresses `ip` (comma-separated).
pub fn make_cert_for(dir: &std::path::Path, ca: &str, name: &str, usage: &str, ip: &str) {
    let (cert, key, csr, ext) = (
        format!("{name}.pem"),
        format!("{name}-key.pem"),
        format!("{name}.csr"),
        format!("{name}.ext"),
    );
    let san = if usage == "serverAuth" {
        let names: Vec<String> = ip.split(',').map(|a| format!("IP:{a}")).collect();
        format!("subjectAltName={}\n", names.join(","))
    } else {
        String::new()
    };
    std::fs::write(dir.join(&ext), format!("{san}extendedKeyUsage={usage}\n")).unwrap();
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            &key,
            "-out",
            &csr,
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}-key.pem"),
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            &ext,
            "-out",
            &cert,
        ],
    );
}

/// An engine endpoint speaking TLS on loopback: it demands a client certificate signed
/// by `client_ca`, presents `server` (signed by its own CA), and forwards the decrypted
/// stream to the local engine's socket. Returns its address and how many TLS
/// handshakes it completed.
pub async fn tls_engine(
    dir: &std::path::Path,
    server: &str,
    client_ca: &str,
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    tokio::task::JoinHandle<()>,
) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use std::sync::Arc;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(dir.join(format!("{client_ca}.pem"))).unwrap())
        .unwrap();
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider.clone())
            .build()
            .unwrap();
    let chain = vec![CertificateDer::from_pem_file(dir.join(format!("{server}.pem"))).unwrap()];
    let key = PrivateKeyDer::from_pem_file(dir.join(format!("{server}-key.pem"))).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let handshakes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = handshakes.clone();
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            // As an engine's own listener (Go sets it): small writes go out at once.
            let _ = tcp.set_nodelay(true);
            let (acceptor, counted) = (acceptor.clone(), counted.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if let Ok(mut unix) = tokio::net::UnixStream::connect("/var/run/docker.sock").await
                {
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut unix).await;
                }
            });
        }
    });
    (addr, handshakes, task)
}
