//! The cases, each a function of a [`Client`].

use std::time::Duration;

use crate::{
    code, Client, Duplex, DuplexCall, EchoStatus, Failure, OutputRequest, UnaryRequest,
    ECHO_INITIAL_VALUE, ECHO_TRAILING_VALUE,
};

/// Why a case failed, for its report line.
type CaseResult = Result<(), String>;

/// The ping-pong sizes of the specification: (response size, request payload size).
const PING_PONG: [(i32, usize); 4] = [(31415, 27182), (9, 8), (2653, 1828), (58979, 45904)];

fn check(ok: bool, what: impl FnOnce() -> String) -> CaseResult {
    if ok {
        Ok(())
    } else {
        Err(what())
    }
}

fn failed(call: &'static str) -> impl Fn(Failure) -> String {
    move |f| format!("{call}: {f}")
}

fn ping(i: usize) -> OutputRequest {
    let (size, payload) = PING_PONG[i];
    OutputRequest {
        response_sizes: vec![size],
        payload,
        echo_status: None,
    }
}

/// Runs interop case `case` with `client`.
///
/// # Errors
/// What failed, for the case's report line.
pub async fn run_case<C: Client>(client: &C, case: &str) -> CaseResult {
    match case {
        "empty_unary" => client.empty_call().await.map_err(failed("EmptyCall")),
        "large_unary" => large_unary(client).await,
        "client_streaming" => client_streaming(client).await,
        "server_streaming" => server_streaming(client).await,
        "ping_pong" => ping_pong(client).await,
        "empty_stream" => empty_stream(client).await,
        "status_code_and_message" => echoed_status(client, "test status message").await,
        "special_status_message" => {
            let message = "\t\ntest with whitespace\r\nand Unicode BMP ☺ and non-BMP 😈\t\n";
            echoed_status(client, message).await
        }
        "custom_metadata" => custom_metadata(client).await,
        "unimplemented_method" => unimplemented(client.unimplemented_call().await),
        "unimplemented_service" => unimplemented(client.unimplemented_service_call().await),
        "cancel_after_begin" => cancel_after_begin(client).await,
        "cancel_after_first_response" => cancel_after_first_response(client).await,
        "timeout_on_sleeping_server" => timeout_on_sleeping_server(client).await,
        other => Err(format!("unknown test case {other:?}")),
    }
}

async fn large_unary<C: Client>(client: &C) -> CaseResult {
    let response = client
        .unary_call(UnaryRequest {
            response_size: 314_159,
            payload: 271_828,
            ..Default::default()
        })
        .await
        .map_err(failed("UnaryCall"))?;
    let len = response.payload.len();
    check(len == 314_159, || {
        format!("response payload of {len} bytes, not 314159")
    })?;
    check(response.payload.iter().all(|b| *b == 0), || {
        "response payload is not zeros".into()
    })
}

async fn client_streaming<C: Client>(client: &C) -> CaseResult {
    let size = client
        .streaming_input_call(vec![27_182, 8, 1_828, 45_904])
        .await
        .map_err(failed("StreamingInputCall"))?;
    check(size == 74_922, || {
        format!("aggregated size {size}, not 74922")
    })
}

async fn server_streaming<C: Client>(client: &C) -> CaseResult {
    let sizes = vec![31_415, 9, 2_653, 58_979];
    let got = client
        .streaming_output_call(OutputRequest {
            response_sizes: sizes.clone(),
            ..Default::default()
        })
        .await
        .map_err(failed("StreamingOutputCall"))?;
    let want: Vec<usize> = sizes.iter().map(|&s| s as usize).collect();
    check(got == want, || {
        format!("response sizes {got:?}, not {want:?}")
    })
}

async fn ping_pong<C: Client>(client: &C) -> CaseResult {
    let mut call = client
        .full_duplex_call(DuplexCall {
            first: vec![ping(0)],
            ..Default::default()
        })
        .await
        .map_err(failed("FullDuplexCall"))?;
    for (i, &(size, _)) in PING_PONG.iter().enumerate() {
        if i > 0 {
            call.send(ping(i))
                .await
                .map_err(failed("FullDuplexCall send"))?;
        }
        let len = call
            .next()
            .await
            .map_err(failed("FullDuplexCall stream"))?
            .ok_or_else(|| format!("stream ended before response {i}"))?;
        check(len == size as usize, || {
            format!("response {i} of {len} bytes, not {size}")
        })?;
    }
    call.close();
    let end = call.next().await.map_err(failed("FullDuplexCall end"))?;
    check(end.is_none(), || "a response after the last request".into())
}

async fn empty_stream<C: Client>(client: &C) -> CaseResult {
    let mut call = client
        .full_duplex_call(DuplexCall {
            close: true,
            ..Default::default()
        })
        .await
        .map_err(failed("FullDuplexCall"))?;
    let first = call.next().await.map_err(failed("FullDuplexCall stream"))?;
    check(first.is_none(), || "a response to no request".into())
}

/// Asks UnaryCall and FullDuplexCall for status 2 with `message`; both must come back
/// as sent (2 is UNKNOWN).
async fn echoed_status<C: Client>(client: &C, message: &str) -> CaseResult {
    let echo = Some(EchoStatus {
        code: 2,
        message: message.into(),
    });
    let status = client
        .unary_call(UnaryRequest {
            echo_status: echo.clone(),
            ..Default::default()
        })
        .await
        .err()
        .ok_or("UnaryCall succeeded")?;
    check(
        status.code == code::UNKNOWN && status.message == message,
        || format!("UnaryCall: {status}"),
    )?;
    let outcome = match client
        .full_duplex_call(DuplexCall {
            first: vec![OutputRequest {
                echo_status: echo,
                ..Default::default()
            }],
            close: true,
            ..Default::default()
        })
        .await
    {
        Ok(mut call) => call.next().await.map(|_| ()),
        Err(status) => Err(status),
    };
    match outcome {
        Err(status) if status.code == code::UNKNOWN && status.message == message => Ok(()),
        other => Err(format!("FullDuplexCall: {other:?}")),
    }
}

/// Sends the echo keys on UnaryCall and FullDuplexCall and finds them in the response
/// headers and trailers.
async fn custom_metadata<C: Client>(client: &C) -> CaseResult {
    let response = client
        .unary_call(UnaryRequest {
            response_size: 314_159,
            payload: 271_828,
            echo_metadata: true,
            ..Default::default()
        })
        .await
        .map_err(failed("UnaryCall"))?;
    let echoed = &response.echoed;
    check(
        echoed.initial.as_deref() == Some(ECHO_INITIAL_VALUE),
        || format!("UnaryCall headers: {echoed:?}"),
    )?;
    check(
        echoed.trailing.as_deref() == Some(&ECHO_TRAILING_VALUE[..]),
        || format!("UnaryCall trailers: {echoed:?}"),
    )?;
    let mut call = client
        .full_duplex_call(DuplexCall {
            first: vec![OutputRequest {
                response_sizes: vec![314_159],
                payload: 271_828,
                echo_status: None,
            }],
            close: true,
            echo_metadata: true,
            timeout: None,
        })
        .await
        .map_err(failed("FullDuplexCall"))?;
    let initial = call.initial();
    check(initial.as_deref() == Some(ECHO_INITIAL_VALUE), || {
        format!("FullDuplexCall headers: {initial:?}")
    })?;
    let trailing = call
        .trailing()
        .await
        .map_err(failed("FullDuplexCall stream"))?;
    check(
        trailing.as_deref() == Some(&ECHO_TRAILING_VALUE[..]),
        || format!("FullDuplexCall trailers: {trailing:?}"),
    )
}

fn unimplemented(outcome: Result<(), Failure>) -> CaseResult {
    let status = outcome.err().ok_or("UnimplementedCall succeeded")?;
    check(status.code == code::UNIMPLEMENTED, || {
        format!("{status}, not UNIMPLEMENTED")
    })
}

/// A client stream that sends nothing, cancelled (dropped) once started: the call must
/// not have completed, and the channel must go on working.
async fn cancel_after_begin<C: Client>(client: &C) -> CaseResult {
    let outcome = tokio::time::timeout(Duration::from_millis(50), client.silent_input_call()).await;
    check(outcome.is_err(), || {
        format!("the call completed: {outcome:?}")
    })?;
    client
        .empty_call()
        .await
        .map_err(failed("EmptyCall after the cancel"))
}

/// A duplex call dropped after its first response, its request stream still open; the
/// channel must go on working.
async fn cancel_after_first_response<C: Client>(client: &C) -> CaseResult {
    let mut call = client
        .full_duplex_call(DuplexCall {
            first: vec![ping(0)],
            ..Default::default()
        })
        .await
        .map_err(failed("FullDuplexCall"))?;
    let first = call
        .next()
        .await
        .map_err(failed("FullDuplexCall stream"))?
        .ok_or("no first response")?;
    check(first == 31_415, || {
        format!("first response of {first} bytes")
    })?;
    call.cancel(ping(1)).await;
    client
        .empty_call()
        .await
        .map_err(failed("EmptyCall after the cancel"))
}

async fn timeout_on_sleeping_server<C: Client>(client: &C) -> CaseResult {
    let outcome = match client
        .full_duplex_call(DuplexCall {
            first: vec![OutputRequest {
                payload: 27_182,
                ..Default::default()
            }],
            close: false,
            echo_metadata: false,
            timeout: Some(Duration::from_millis(1)),
        })
        .await
    {
        Ok(mut call) => call.next().await.map(|_| ()),
        Err(status) => Err(status),
    };
    match outcome {
        Err(status) if status.code == code::DEADLINE_EXCEEDED => Ok(()),
        // A client's own timer, when it fires before the server's answer arrives (a
        // loaded machine), may end the call with its own status.
        Err(status) if C::OWN_DEADLINE == Some((status.code, status.message.as_str())) => Ok(()),
        other => Err(format!("{other:?}, not DEADLINE_EXCEEDED")),
    }
}
