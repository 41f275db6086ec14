//! `chat-client --addr URL --name NAME`: joins the chat room; each line of stdin is a
//! post, each event of the room is printed as `#SEQ NAME: TEXT` (or `joined` / `left`).
//! End of input leaves the room.

use clap::Parser;
use examples::chat::chat_client::ChatClient;
use examples::chat::{event, Post};
use examples::transport::TransportArgs;
use examples::NAME_KEY;
use futures_util::StreamExt;
use rdmarpc_core::Request;
use tokio::io::AsyncBufReadExt;

/// Joins a chat room.
#[derive(Parser, Debug)]
struct Args {
    #[command(flatten)]
    transport: TransportArgs,
    /// Your name in the room.
    #[arg(long)]
    name: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    examples::init_tracing();
    let args = Args::parse();
    let resolved = args.transport.resolve("auto://127.0.0.1:50053", 1 << 20)?;
    let client = ChatClient::new(resolved.connect(None).await?);
    let lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let posts = futures_util::stream::unfold(lines, |mut lines| async move {
        let line = lines.next_line().await.ok()??;
        Some((Post { text: line }, lines))
    })
    .boxed();
    let mut request = Request::new(posts);
    request.metadata_mut().insert(NAME_KEY, args.name);
    let mut events = client.join(request).await?.into_inner();
    while let Some(event) = events.message().await? {
        match event.kind() {
            event::Kind::Posted => println!("#{} {}: {}", event.seq, event.from, event.text),
            event::Kind::Joined => println!("#{} {} joined", event.seq, event.from),
            event::Kind::Left => println!("#{} {} left", event.seq, event.from),
        }
    }
    Ok(())
}
