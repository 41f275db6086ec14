//! `test-certs DIR`: writes a throw-away CA and server and client certificates into DIR
//! (`ca.pem`, `server.pem`, `server.key`, `client.pem`, `client.key`), for scripts that
//! run TLS interop cases.

fn main() -> anyhow::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("usage: test-certs DIR"))?;
    test_certs::write_set(std::path::Path::new(&dir))?;
    println!("{dir}");
    Ok(())
}
