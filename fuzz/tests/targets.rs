//! The targets on their corpus and seeds, and how deep mutated inputs get into the
//! decoders: a mutator that stopped producing valid frames would fuzz nothing but the
//! first check, and still pass.

use rdmarpc_core::wire::{Frame, Header};
use rdmarpc_core::Metadata;
use rdmarpc_transport_rdma::fuzzing::{decode_control, decode_hello, ControlBody, Hello};
use rpc_fuzz::mutate::Mutator;
use rpc_fuzz::rng::Rng;
use rpc_fuzz::runner;
use rpc_fuzz::{tcp_stream, Target, TARGETS};

#[test]
fn every_corpus_file_and_seed_passes() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for t in &TARGETS {
        let files = runner::load_dir(&root.join(t.name)).unwrap();
        assert!(!files.is_empty(), "{}: empty corpus", t.name);
        if let Some(crash) = runner::replay(t, &files) {
            panic!("{}: {:?}: {}", t.name, crash.origin, crash.message);
        }
        for (name, seed) in (t.seeds)() {
            runner::catch(t.run, &seed).unwrap_or_else(|e| panic!("{}/{name}: {e}", t.name));
        }
    }
}

/// Of 20 000 mutated inputs of `target`'s seeds, how many `reached` accepts.
fn reached(target: &Target, reached: impl Fn(&[u8]) -> bool) -> usize {
    let seeds: Vec<Vec<u8>> = (target.seeds)().into_iter().map(|(_, b)| b).collect();
    let mutator = Mutator::new(&seeds, target.fields, 1 << 17);
    let mut rng = Rng::new(1, target.name);
    (0..20_000)
        .filter(|_| reached(&mutator.next_input(&mut rng)))
        .count()
}

#[test]
fn mutated_inputs_get_past_the_first_checks() {
    let [frame, metadata, control, handshake, tcp, client, server, ..] = &TARGETS;
    // Whole frames with a valid metadata block: 15% at the time of writing.
    let n = reached(frame, |d| {
        Frame::parse(d).is_ok_and(|f| !f.is_discarded() && Metadata::decode(f.metadata).is_ok())
    });
    assert!(n > 1000, "frame: {n}");
    // Metadata blocks of more than one entry: 2% at the time of writing.
    assert!(reached(metadata, |d| Metadata::decode(d).is_ok_and(|m| m.len() > 1)) > 100);
    // Every kind of RDMA message with a valid header (or tokens): 4 to 13%.
    let kinds: [fn(&ControlBody) -> bool; 3] = [
        |b| {
            matches!(
                b,
                ControlBody::Data {
                    header: Ok(Some(_)),
                    ..
                }
            )
        },
        |b| {
            matches!(
                b,
                ControlBody::Rendezvous {
                    header: Ok(Some(_)),
                    ..
                }
            )
        },
        |b| matches!(b, ControlBody::Control { tokens } if !tokens.is_empty()),
    ];
    for (i, kind) in kinds.iter().enumerate() {
        let n = reached(control, |d| decode_control(d).is_ok_and(|m| kind(&m.body)));
        assert!(n > 200, "rdma_control kind {i}: {n}");
    }
    // Accepted offers: 14% at the time of writing.
    let n = reached(handshake, |d| {
        matches!(decode_hello(d), Ok(Hello::Offer { .. }))
    });
    assert!(n > 1000, "handshake: {n}");
    // Streams whose first frame is whole and valid, with more after it.
    let n = reached(tcp, |d| {
        let stream = d.get(tcp_stream::PREFIX..).unwrap_or_default();
        matches!(Header::decode(stream), Ok(Some(h)) if stream.len() > h.frame_len())
    });
    assert!(n > 1000, "tcp_stream: {n}");
    // Scripts with three well-formed frames or more.
    for demux in [client, server] {
        let n = reached(demux, |d| {
            let steps = rdmarpc_core::fuzzing::steps(d, &[0; rdmarpc_core::fuzzing::CALLS]);
            steps
                .iter()
                .filter(|s| Frame::parse(&s.bytes).is_ok())
                .count()
                >= 3
        });
        assert!(n > 1000, "{}: {n}", demux.name);
    }
    // gRPC client scripts that get a gRPC response's headers (status 200, a gRPC
    // content-type, no trailers-only status), then body and trailers: 25% at the time
    // of writing.
    let grpc_client = rpc_fuzz::target("grpc_client").expect("a target");
    let n = reached(grpc_client, |d| {
        let steps = rdmarpc_grpc::fuzzing::client_steps(d);
        let headed = steps.iter().position(|&(at, op, n)| {
            op == 5 && n >= 2 && d.get(at).is_some_and(|b| b & 0x13 == 0x02)
        });
        headed.is_some_and(|i| {
            let rest = &steps[i..];
            rest.iter().any(|s| matches!(s.1, 6 | 7)) && rest.iter().any(|s| s.1 == 8)
        })
    });
    assert!(n > 1000, "grpc_client: {n}");
}
