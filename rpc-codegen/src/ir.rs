//! The intermediate representation the emitter consumes.
//!
//! Front ends describe services through these two traits; the emitter
//! ([`CodeGenBuilder`](crate::CodeGenBuilder)) only ever sees them. The prost front end implements
//! them for [`prost_build::Service`] and [`prost_build::Method`], the [`manual`](crate::manual)
//! front end for its own builder types.

/// A service: one server trait, one client type and one table of method descriptors.
///
/// Names follow protobuf: the route of a method is
/// `/<package>.<proto_name>/<method proto_name>`, or `/<proto_name>/<method proto_name>` when
/// the package is empty.
pub trait Service {
    /// The method type of this service.
    type Method: Method;

    /// The service name in Rust style (`UpperCamelCase`), e.g. `Echo`.
    ///
    /// It names the server trait (`Echo`), the client (`EchoClient`), the server wrapper
    /// (`EchoServer`) and the modules (`echo_client`, `echo_server`, `echo_methods`).
    fn name(&self) -> &str;

    /// The service name as written in the `.proto` file; used on the wire.
    fn proto_name(&self) -> &str;

    /// The protobuf package, e.g. `acme.store`; may be empty.
    fn package(&self) -> &str;

    /// Documentation lines, each without the leading `///`; an empty line separates paragraphs.
    fn comments(&self) -> Vec<String>;

    /// The methods, in the order that fixes their index in `Service::call`.
    fn methods(&self) -> &[Self::Method];
}

/// One RPC of a [`Service`].
pub trait Method {
    /// The method name in Rust; the emitter converts it to `snake_case` and escapes keywords.
    fn name(&self) -> &str;

    /// The method name as written in the `.proto` file; used on the wire.
    fn proto_name(&self) -> &str;

    /// Documentation lines, each without the leading `///`.
    fn comments(&self) -> Vec<String>;

    /// The Rust type of the request message.
    ///
    /// A path is resolved like prost-build resolves message types: relative to the module that
    /// includes the generated file (`EchoRequest`, `super::common::Money`), unless it is absolute
    /// (`crate::…`, `::…`) or not a path at all (`()`).
    fn input_type(&self) -> &str;

    /// The Rust type of the response message; resolved like [`input_type`](Self::input_type).
    fn output_type(&self) -> &str;

    /// Whether the client sends a stream of messages.
    fn client_streaming(&self) -> bool {
        false
    }

    /// Whether the server answers with a stream of messages.
    fn server_streaming(&self) -> bool {
        false
    }

    /// Whether the method may be sent again after a failure: the `.proto` declares it
    /// `option idempotency_level = IDEMPOTENT` (or `NO_SIDE_EFFECTS`).
    fn idempotent(&self) -> bool {
        false
    }
}
