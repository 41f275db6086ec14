// tests/greeter.rs: the service in memory (no network) and over real TCP sockets
use hello_rpc::hello::greeter_client::GreeterClient;
use hello_rpc::hello::greeter_server::GreeterServer;
use hello_rpc::hello::{CountdownRequest, HelloRequest};
use hello_rpc::MyGreeter;
use rdmarpc_core::{Channel, Code, Endpoint, Server};
use rdmarpc_transport::{AnyListener, TransportSettings};

fn server() -> Server {
    Server::builder()
        .add_service(GreeterServer::new(MyGreeter))
        .expect("one service, no clashes")
        .build()
}

#[tokio::test]
async fn in_memory() {
    let (listener, connector) = rdmarpc_core::memory::listener(4 << 20);
    let server = server();
    tokio::spawn(async move { server.serve(listener).await });
    let client = GreeterClient::new(Channel::new(connector.connect().await.unwrap()));

    let reply = client
        .say_hello(HelloRequest { name: "Ada".into() })
        .await
        .unwrap();
    assert_eq!(reply.into_inner().message, "Hello, Ada (over memory)!");
    let status = client.say_hello(HelloRequest::default()).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
}

#[tokio::test]
async fn over_tcp_with_a_lazy_client() {
    let endpoint: Endpoint = "tcp://127.0.0.1:0".parse().unwrap();
    let listener = AnyListener::bind(&endpoint, &TransportSettings::default())
        .await
        .unwrap();
    let url = format!("tcp://127.0.0.1:{}", listener.port());
    let server = server();
    tokio::spawn(async move { server.serve(listener).await });

    // Nothing is dialled until the first call.
    let client = GreeterClient::connect_lazy(&url).unwrap();
    assert!(client.channel().connection().is_none());
    let reply = client
        .say_hello(HelloRequest { name: "Ada".into() })
        .await
        .unwrap();
    assert_eq!(reply.into_inner().message, "Hello, Ada (over tcp)!");

    let request = CountdownRequest {
        name: "Ada".into(),
        count: 3,
    };
    let mut countdown = client.countdown(request).await.unwrap().into_inner();
    let mut messages = Vec::new();
    while let Some(reply) = countdown.message().await.unwrap() {
        messages.push(reply.message);
    }
    assert_eq!(messages, ["3... Ada", "2... Ada", "1... Ada"]);
}
