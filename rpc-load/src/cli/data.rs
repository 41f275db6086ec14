//! Flags that say what each call sends: its data and metadata (ghz's "Data" flags), the
//! templates in them, and what streaming calls send and read.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args as ClapArgs};

use super::values::{parse_bool, parse_duration};

/// The request data and metadata.
#[derive(ClapArgs, Debug, Clone, Default)]
pub struct DataFlags {
    /// The call data as stringified JSON (an array: several messages, used round-robin;
    /// a client stream sends them in order). '@' reads it from stdin; '@FILE' from FILE
    /// (rpc-load's addition). ghz's template actions ({{.RequestNumber}}, {{newUUID}},
    /// ...) are rendered for every call.
    #[arg(short = 'd', long, value_name = "JSON")]
    pub data: Option<String>,
    /// File path for the call data JSON (used unless -d is '@').
    #[arg(short = 'D', long = "data-file", value_name = "PATH")]
    pub data_file: Option<PathBuf>,
    /// The call data comes as a serialized binary message, or several count-prefixed
    /// ones (each after its length as a varint), read from stdin.
    #[arg(short = 'b', long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1,
        require_equals = true, default_missing_value = "true", default_value = "false",
        value_parser = parse_bool)]
    pub binary: bool,
    /// File path for the call data as a serialized binary message, or several
    /// count-prefixed ones (takes precedence over -b and -d).
    #[arg(short = 'B', long = "binary-file", value_name = "PATH")]
    pub binary_file: Option<PathBuf>,
    /// Request metadata as stringified JSON (an object of strings; template actions are
    /// rendered for every call). '@FILE' reads it from FILE (rpc-load's addition).
    #[arg(short = 'm', long, value_name = "JSON")]
    pub metadata: Option<String>,
    /// File path for the call metadata JSON (takes precedence over -m).
    #[arg(short = 'M', long = "metadata-file", value_name = "PATH")]
    pub metadata_file: Option<PathBuf>,
    /// Fill a payload of this many bytes into the request (see --payload-field;
    /// rpc-load's addition).
    #[arg(long, value_name = "BYTES")]
    pub payload_size: Option<usize>,
    /// The bytes or string field --payload-size fills; default: the first bytes field.
    #[arg(long, value_name = "FIELD", requires = "payload_size")]
    pub payload_field: Option<String>,
    /// Interval for stream requests between message sends.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub stream_interval: Option<Duration>,
    /// Duration after which the client closes the stream in each streaming call (client
    /// and bidirectional: stops sending; server streams: stops reading and cancels).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub stream_call_duration: Option<Duration>,
    /// Count of messages sent (client and bidirectional streams: the -d array cycled or
    /// cut) or read (server streams, then cancelled) in each streaming call.
    #[arg(long, value_name = "N")]
    pub stream_call_count: Option<u64>,
    /// Bidirectional streams: send each request message only once a response came for
    /// the one before (one message each way per round trip; the stream messages received
    /// count the round trips). rpc-load's addition.
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1,
        require_equals = true, default_missing_value = "true", default_value = "false",
        value_parser = parse_bool)]
    pub stream_ping_pong: bool,
    /// In streaming calls, regenerate and apply call template data on every message sent.
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1,
        require_equals = true, default_missing_value = "true", default_value = "false",
        value_parser = parse_bool)]
    pub stream_dynamic_messages: bool,
    /// Do not use and execute any template functions (newUUID, randomString, randomInt)
    /// in call data and metadata: using one is then an error.
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1,
        require_equals = true, default_missing_value = "true", default_value = "false",
        value_parser = parse_bool)]
    pub disable_template_functions: bool,
    /// Do not use and execute any call template data: data and metadata are sent as
    /// given, `{{...}}` included (implies --disable-template-functions).
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1,
        require_equals = true, default_missing_value = "true", default_value = "false",
        value_parser = parse_bool)]
    pub disable_template_data: bool,
}

impl DataFlags {
    /// The `--stream-*` options.
    pub fn stream_options(&self) -> crate::streams::StreamOptions {
        crate::streams::StreamOptions {
            interval: self.stream_interval.filter(|d| !d.is_zero()),
            call_duration: self.stream_call_duration.filter(|d| !d.is_zero()),
            call_count: self.stream_call_count.filter(|&n| n > 0),
            ping_pong: self.stream_ping_pong,
        }
    }
}
