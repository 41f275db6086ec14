//! `tonic-interop-client --addr http://HOST:PORT --test_case CASE[,CASE...]|all`: the
//! interop cases with tonic's client; one line per case, non-zero exit if any fails.
//! Under TLS: `--addr https://HOST:PORT --ca_file CA.pem [--server_host_override NAME]`.

use clap::Parser;

#[derive(Parser)]
struct Args {
    /// The server, e.g. http://127.0.0.1:7000.
    #[arg(long)]
    addr: String,
    /// Comma-separated cases, or `all`.
    #[arg(long = "test_case", default_value = "all")]
    test_case: String,
    /// PEM roots the server's certificate must lead to (with an https:// address).
    #[arg(long = "ca_file")]
    ca_file: Option<std::path::PathBuf>,
    /// The name the server's certificate must carry, instead of the address's host.
    #[arg(long = "server_host_override")]
    server_host_override: Option<String>,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let cases: Vec<&str> = if args.test_case == "all" {
        grpc_interop::CASES.to_vec()
    } else {
        args.test_case.split(',').collect()
    };
    let endpoint = tonic::transport::Endpoint::from_shared(args.addr.clone()).and_then(|e| {
        match &args.ca_file {
            None => Ok(e),
            Some(ca) => {
                let pem = std::fs::read(ca).unwrap_or_else(|err| {
                    eprintln!("cannot read {}: {err}", ca.display());
                    std::process::exit(2)
                });
                let mut tls = tonic::transport::ClientTlsConfig::new()
                    .ca_certificate(tonic::transport::Certificate::from_pem(pem));
                if let Some(name) = &args.server_host_override {
                    tls = tls.domain_name(name.clone());
                }
                e.tls_config(tls)
            }
        }
    });
    let channel = match endpoint {
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
