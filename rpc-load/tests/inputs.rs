//! The run's inputs are read once, before the run (`-d @FILE` through a FIFO, which a
//! second read would wait on for ever), and within bounds: `/dev/zero` given to each of
//! `-d @`, `-d @FILE`, `-D`, `-m @FILE`, `-M`, `-b` and `-B` fails with an error naming
//! the flag instead of growing without end.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// `rpc-load --proto echo.proto --call echo.Echo.Echo -n 4 ARGS... URL`, with `stdin`.
fn spawn(args: &[&str], url: &str, stdin: Stdio) -> Child {
    let proto = proto_dir().join("echo.proto").display().to_string();
    Command::new(env!("CARGO_BIN_EXE_rpc-load"))
        .args(["--proto", &proto, "--call", "echo.Echo.Echo", "-n", "4"])
        .args(args)
        .arg(url)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The child's output, or a failure if it has not ended within a minute (it is killed).
fn wait(mut child: Child, what: &str) -> Output {
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("{what}: still running after a minute");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_from_a_fifo_is_read_once() {
    let url = start_rpc_server().await;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("data.fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            // Opening blocks until rpc-load opens the FIFO to read; written once.
            let mut file = std::fs::OpenOptions::new().write(true).open(fifo).unwrap();
            file.write_all(br#"{"payload":"aGk="}"#).unwrap();
        })
    };
    let arg = format!("@{}", fifo.display());
    let url2 = url.clone();
    let out = tokio::task::spawn_blocking(move || {
        wait(
            spawn(&["-d", &arg, "-O", "json"], &url2, Stdio::null()),
            "-d @FIFO",
        )
    })
    .await
    .unwrap();
    writer.join().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["count"], 4);
    assert_eq!(report["errors"], 0);
    assert_eq!(
        report["options"]["data"],
        serde_json::json!({"payload": "aGk="})
    );
}

/// Whether `path` exists (`/dev/zero` on this system).
fn has(path: &str) -> bool {
    Path::new(path).exists()
}

/// `/dev/zero` as each input: the run does not start, and says which flag read too much.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_inputs_are_refused_naming_the_flag() {
    if !has("/dev/zero") {
        return;
    }
    let url = start_rpc_server().await;
    let text = rdmarpc_load::data::MAX_TEXT_BYTES;
    let binary = rdmarpc_load::data::MAX_BINARY_BYTES;
    // (flags, whether standard input is /dev/zero, what the error says)
    let cases: [(&[&str], bool, String); 7] = [
        (
            &["-d", "@"],
            true,
            format!("-d @ (standard input): more than {text} bytes"),
        ),
        (
            &["-d", "@/dev/zero"],
            false,
            format!("-d /dev/zero: more than {text} bytes"),
        ),
        (
            &["-D", "/dev/zero"],
            false,
            format!("-D /dev/zero: more than {text} bytes"),
        ),
        (
            &["-m", "@/dev/zero"],
            false,
            format!("-m /dev/zero: more than {text} bytes"),
        ),
        (
            &["-M", "/dev/zero"],
            false,
            format!("-M /dev/zero: more than {text} bytes"),
        ),
        (
            &["-b"],
            true,
            format!("-b (standard input): more than {binary} bytes"),
        ),
        (
            &["-B", "/dev/zero"],
            false,
            format!("-B /dev/zero: more than {binary} bytes"),
        ),
    ];
    for (flags, zero_in, expected) in cases {
        let url = url.clone();
        let out = tokio::task::spawn_blocking(move || {
            let stdin = match zero_in {
                true => Stdio::from(std::fs::File::open("/dev/zero").unwrap()),
                false => Stdio::null(),
            };
            wait(spawn(flags, &url, stdin), &flags.join(" "))
        })
        .await
        .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flags:?}");
        assert!(stderr.contains(&expected), "{flags:?}: {stderr}");
    }
}

/// Standard input can be read once: two flags that would both read it are refused
/// before either reads (the second got nothing, or waited on a terminal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_readers_of_standard_input_are_refused() {
    let url = start_rpc_server().await;
    for (flags, expected) in [
        (&["-m", "@", "-d", "@"][..], "-d @ and -m @"),
        (&["-m", "@", "-b"], "-b and -m @"),
    ] {
        let url = url.clone();
        let out = tokio::task::spawn_blocking(move || {
            wait(spawn(flags, &url, Stdio::null()), &flags.join(" "))
        })
        .await
        .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flags:?}");
        assert!(
            stderr.contains(expected) && stderr.contains("read standard input"),
            "{flags:?}: {stderr}"
        );
    }
}

/// A template whose actions render more than the text bound in all is refused before the
/// run, naming the flag (each `{{randomString N}}` is bounded, but 65 of 1 MiB are not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn templates_that_render_too_much_are_refused_naming_the_flag() {
    let url = start_rpc_server().await;
    let dir = tempfile::tempdir().unwrap();
    let many = r#""{{randomString 1048576}}","#.repeat(65);
    let data = dir.path().join("data.json");
    std::fs::write(&data, format!(r#"{{"payload": [{many}]}}"#)).unwrap();
    let metadata = dir.path().join("metadata.json");
    std::fs::write(
        &metadata,
        format!(r#"{{"k": "{}"}}"#, many.replace(",", "")),
    )
    .unwrap();
    let (data, metadata) = (data.display().to_string(), metadata.display().to_string());
    for (flag, file) in [("-D", data), ("-M", metadata)] {
        let url = url.clone();
        let out = tokio::task::spawn_blocking(move || {
            wait(spawn(&[flag, &file], &url, Stdio::null()), flag)
        })
        .await
        .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag}");
        let expected = format!("of {flag}: the template renders up to");
        assert!(stderr.contains(&expected), "{flag}: {stderr}");
    }
}
