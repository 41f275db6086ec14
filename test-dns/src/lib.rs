//! dnsmasq started by a test: a real DNS server whose records the test changes while it
//! runs (the discovery tests of `rdmarpc-core` and `examples`).
//!
//! The server listens on 127.0.0.1 only, on a port free when it starts. A port chosen free
//! can be taken before dnsmasq binds it (it binds UDP and TCP, and every test in the
//! process opens sockets): dnsmasq then exits at once, and [`Dnsmasq::start`] starts it
//! again on another port.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running dnsmasq, killed when dropped.
#[derive(Debug)]
pub struct Dnsmasq {
    child: Child,
    port: u16,
    hosts: PathBuf,
    _dir: tempfile::TempDir,
}

impl Dnsmasq {
    /// Starts dnsmasq serving `hosts` (an `/etc/hosts`-style file, re-read by
    /// [`set_hosts`](Self::set_hosts)) with `extra` command-line options (for example
    /// `--srv-host=...`), records with a TTL of 0. Panics when it cannot start within 10 s.
    pub fn start(hosts: &str, extra: &[String]) -> Dnsmasq {
        let dir = tempfile::tempdir().expect("a temporary directory");
        // dnsmasq started as root reads the file as `nobody` after dropping privileges.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = dir.path().join("hosts");
        std::fs::write(&path, hosts).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut exits = Vec::new();
        loop {
            let port = free_port();
            let mut args = vec![
                "--keep-in-foreground".to_owned(),
                "--conf-file=/dev/null".to_owned(),
                "--no-resolv".to_owned(),
                "--no-hosts".to_owned(),
                "--pid-file=".to_owned(),
                "--bind-interfaces".to_owned(),
                "--listen-address=127.0.0.1".to_owned(),
                format!("--port={port}"),
                "--local-ttl=0".to_owned(),
                format!("--addn-hosts={}", path.display()),
            ];
            args.extend_from_slice(extra);
            let mut child = Command::new(program())
                .args(&args)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("dnsmasq (Debian's dnsmasq-base; scripts/install-deps installs it)");
            loop {
                if let Some(status) = child.try_wait().unwrap() {
                    // Lost the port, or a bad option: the message says which.
                    let mut err = String::new();
                    if let Some(mut stderr) = child.stderr.take() {
                        use std::io::Read;
                        let _ = stderr.read_to_string(&mut err);
                    }
                    exits.push(format!("port {port}: {status}: {}", err.trim()));
                    break;
                }
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return Dnsmasq {
                        child,
                        port,
                        hosts: path,
                        _dir: dir,
                    };
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("dnsmasq did not answer within 10 s; earlier exits: {exits:?}");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            assert!(
                Instant::now() < deadline && exits.len() < 20,
                "dnsmasq could not start: {exits:?}"
            );
        }
    }

    /// The port it answers on (UDP and TCP) at 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Replaces the records and has dnsmasq read them again (SIGHUP).
    pub fn set_hosts(&self, hosts: &str) {
        std::fs::write(&self.hosts, hosts).unwrap();
        let status = Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port free for both UDP and TCP on 127.0.0.1 at the time of asking.
fn free_port() -> u16 {
    loop {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = udp.local_addr().unwrap().port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

fn program() -> &'static str {
    ["/usr/sbin/dnsmasq", "/sbin/dnsmasq"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("dnsmasq")
}
