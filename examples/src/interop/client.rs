//! `interop-client --addr URL --test_case CASE[,CASE...]`: runs gRPC interop cases
//! against an interop server, one line per case; exits non-zero if any fails.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use examples::interop::{self, InteropClients};
use examples::transport::TransportArgs;

/// Runs interop test cases.
#[derive(Parser, Debug)]
struct Args {
    #[command(flatten)]
    transport: TransportArgs,
    /// Comma-separated cases, or `all`: empty_unary, large_unary, client_streaming,
    /// server_streaming, ping_pong, empty_stream, status_code_and_message,
    /// special_status_message, custom_metadata, unimplemented_method,
    /// unimplemented_service, cancel_after_begin, cancel_after_first_response,
    /// timeout_on_sleeping_server.
    #[arg(long = "test_case", default_value = "all")]
    test_case: String,
    /// Time allowed to each case, in seconds.
    #[arg(long, default_value_t = 60)]
    case_timeout: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    examples::init_tracing();
    let args = Args::parse();
    let cases: Vec<&str> = if args.test_case == "all" {
        interop::CASES.to_vec()
    } else {
        args.test_case.split(',').map(str::trim).collect()
    };
    let resolved = args.transport.resolve("auto://127.0.0.1:50052", 4 << 20)?;
    let channel = resolved.connect(None).await?;
    let clients = InteropClients::new(channel);
    let mut failed = 0;
    for case in &cases {
        let start = Instant::now();
        let limit = Duration::from_secs(args.case_timeout);
        let outcome = tokio::time::timeout(limit, interop::run_case(&clients, case))
            .await
            .unwrap_or_else(|_| Err(format!("did not finish within {limit:?}")));
        let took = start.elapsed();
        match outcome {
            Ok(()) => println!("PASS {case} ({:.1} ms)", took.as_secs_f64() * 1e3),
            Err(why) => {
                failed += 1;
                println!("FAIL {case}: {why}");
            }
        }
    }
    println!(
        "{} of {} cases passed over {}",
        cases.len() - failed,
        cases.len(),
        resolved.endpoint
    );
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
