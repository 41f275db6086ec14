//! `tonic-interop-client --addr http://HOST:PORT --test_case CASE[,CASE...]|all`: the
//! interop cases with tonic's client; one line per case, non-zero exit if any fails.

use clap::Parser;

#[derive(Parser)]
struct Args {
    /// The server, e.g. http://127.0.0.1:7000.
    #[arg(long)]
    addr: String,
    /// Comma-separated cases, or `all`.
    #[arg(long = "test_case", default_value = "all")]
    test_case: String,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let cases: Vec<&str> = if args.test_case == "all" {
        grpc_interop::CASES.to_vec()
    } else {
        args.test_case.split(',').collect()
    };
    let channel = match tonic::transport::Endpoint::from_shared(args.addr.clone()) {
        Ok(endpoint) => match endpoint.connect().await {
            Ok(channel) => channel,
            Err(e) => {
                eprintln!("cannot connect to {}: {e}", args.addr);
                std::process::exit(2);
            }
        },
        Err(e) => {
            eprintln!("bad address {}: {e}", args.addr);
            std::process::exit(2);
        }
    };
    let mut failed = 0;
    for case in &cases {
        match grpc_interop::run_case(channel.clone(), case).await {
            Ok(()) => println!("{case}: ok"),
            Err(e) => {
                failed += 1;
                println!("{case}: FAILED: {e}");
            }
        }
    }
    println!(
        "{} of {} cases passed over {} (tonic's client)",
        cases.len() - failed,
        cases.len(),
        args.addr
    );
    std::process::exit(i32::from(failed > 0));
}
