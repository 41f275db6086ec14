//! Tools of the hostile-peer suite: a real server process with /proc readings, raw
//! frames, and a well-behaved client.

#[allow(dead_code)] // each suite uses a part
pub(crate) mod grpc;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use examples::echo::echo_client::EchoClient;
use examples::echo::EchoRequest;
use prost::Message;
use rdmarpc_core::wire::{Flags, Frame, FrameKind, Header, HEADER_LEN};
use rdmarpc_core::{Channel, ClientConfig, Metadata, Status};
use rdmarpc_transport_tcp::{TcpConfig, TcpConnection};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The echo method's wire id.
pub(crate) const ECHO: u32 = rdmarpc_core::codegen::method_id("/echo.Echo/Echo");

/// Prints one measured figure of the suite.
pub(crate) fn report(line: &str) {
    eprintln!("hostile: {line}");
}

/// An `echo-server` process on a free port of 127.0.0.1, killed on drop.
pub(crate) struct ServerProcess {
    child: Child,
    pub(crate) port: u16,
    pub(crate) log: PathBuf,
}

fn server_bin() -> String {
    std::env::var("HOSTILE_SERVER_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_echo-server").into())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl ServerProcess {
    /// Starts `echo-server --addr tcp://127.0.0.1:PORT` with extra environment variables.
    pub(crate) fn start(env: &[(&str, &str)]) -> ServerProcess {
        ServerProcess::spawn(env, None)
    }

    /// Like [`ServerProcess::start`], under an address-space limit (`ulimit -v`).
    pub(crate) fn start_limited(env: &[(&str, &str)], address_space: u64) -> ServerProcess {
        ServerProcess::spawn(env, Some(address_space))
    }

    fn spawn(env: &[(&str, &str)], address_space: Option<u64>) -> ServerProcess {
        ServerProcess::spawn_on(free_port(), env, address_space)
    }

    fn spawn_on(port: u16, env: &[(&str, &str)], address_space: Option<u64>) -> ServerProcess {
        let log = std::env::temp_dir().join(format!("hostile-echo-server-{port}.log"));
        let addr = format!("tcp://127.0.0.1:{port}");
        let mut command = match address_space {
            Some(bytes) => {
                let mut c = Command::new("bash");
                c.args(["-c", "ulimit -v $0 && exec \"$@\""])
                    .arg((bytes / 1024).to_string())
                    .arg(server_bin());
                c
            }
            None => Command::new(server_bin()),
        };
        command
            .args(["--addr", &addr])
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let child = command.spawn().expect("start echo-server");
        let server = ServerProcess { child, port, log };
        let deadline = Instant::now() + Duration::from_secs(20);
        // The port is up once a connect succeeds (the probe closes before a byte).
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "echo-server did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    pub(crate) fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    fn status_field(&self, field: &str) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    /// Resident memory in KiB.
    pub(crate) fn rss_kib(&self) -> u64 {
        self.status_field("VmRSS:")
    }

    /// Open file descriptors.
    pub(crate) fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// Waits until at most `fds` descriptors are open; how long it took.
    pub(crate) async fn wait_fds_at_most(&self, fds: usize, within: Duration) -> Option<Duration> {
        let started = Instant::now();
        while started.elapsed() < within {
            if self.fds() <= fds {
                return Some(started.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }

    pub(crate) fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("server log: {}", self.log.display());
        }
    }
}

/// A channel to the server's port over TCP.
pub(crate) async fn channel(port: u16, max_message_size: usize) -> EchoClient<TcpConnection> {
    let mut tcp = TcpConfig::default();
    tcp.max_message_size(max_message_size);
    let conn = TcpConnection::connect(("127.0.0.1", port), &tcp)
        .await
        .expect("connect");
    let mut config = ClientConfig::default();
    config.max_message_size(max_message_size);
    EchoClient::new(Channel::with_config(conn, config))
}

/// One echo call from a fresh, well-behaved client, content checked, within 5 s.
pub(crate) async fn good_call(port: u16) -> Result<Duration, Status> {
    let started = Instant::now();
    let call = async {
        let client = channel(port, 1 << 20).await;
        let payload: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let reply = client
            .echo(EchoRequest {
                payload: payload.clone().into(),
                ..Default::default()
            })
            .await?;
        assert_eq!(reply.into_inner().payload, payload, "echoed content");
        Ok(started.elapsed())
    };
    tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .unwrap_or_else(|_| {
            Err(Status::deadline_exceeded(
                "good client not served within 5 s",
            ))
        })
}

/// A request frame for `method` carrying `message`.
pub(crate) fn request_frame(
    call_id: u64,
    method: u32,
    message: &impl Message,
    timeout_us: u64,
) -> Vec<u8> {
    let mut header = Header::new(FrameKind::Request, call_id);
    header.flags = Flags::END_STREAM;
    header.method_id = method;
    header.timeout_us = timeout_us;
    header.payload_len = message.encoded_len() as u32;
    let mut buf = Vec::new();
    rdmarpc_core::wire::encode_head(&mut header, &Metadata::new(), &mut buf);
    message.encode_raw(&mut buf);
    buf
}

/// A frame of `kind` with no body.
pub(crate) fn control_frame(kind: FrameKind, call_id: u64) -> Vec<u8> {
    Header::new(kind, call_id).encode().to_vec()
}

/// The first bytes of an RDMA hello (the magic), and no more.
pub(crate) fn rdma_hello_prefix() -> Vec<u8> {
    b"RDMAHELO".to_vec()
}

/// Reads one frame; `None` at EOF or on an error.
pub(crate) async fn read_frame(rx: &mut (impl AsyncReadExt + Unpin)) -> Option<(Header, Vec<u8>)> {
    let mut head = [0u8; HEADER_LEN];
    rx.read_exact(&mut head).await.ok()?;
    let header = Header::decode(&head).ok()??;
    let mut frame = head.to_vec();
    frame.resize(header.frame_len(), 0);
    rx.read_exact(&mut frame[HEADER_LEN..]).await.ok()?;
    let payload = Frame::parse(&frame).ok()?.payload.to_vec();
    Some((header, payload))
}

/// Writes `chunk` again and again, up to `max_mib` MiB, until a write makes no progress
/// for a second (the peer stopped reading) or fails. Returns the bytes written.
pub(crate) async fn write_until_stalled(
    stream: &mut TcpStream,
    chunk: &[u8],
    max_mib: usize,
) -> usize {
    let (mut sent, mut at) = (0, 0);
    while sent < max_mib << 20 {
        // Resume where a partial write stopped, so frames stay aligned.
        match tokio::time::timeout(Duration::from_secs(1), stream.write(&chunk[at..])).await {
            Ok(Ok(n)) if n > 0 => {
                sent += n;
                at = (at + n) % chunk.len();
            }
            _ => break,
        }
    }
    sent
}

/// Open descriptors once the server settled (connections of earlier clients closed).
pub(crate) async fn settled_fds(server: &ServerProcess) -> usize {
    let mut last = server.fds();
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = server.fds();
        if now == last {
            return now;
        }
        last = now;
    }
    last
}

/// Reads and discards until the server closes `stream`; how long that took, or `None`
/// if it is still open after `within`.
pub(crate) async fn wait_closed(stream: &mut TcpStream, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let left = within.checked_sub(started.elapsed())?;
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => {}
            Err(_) => return None,
        }
    }
}
