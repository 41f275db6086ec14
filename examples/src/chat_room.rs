//! [`ChatRoom`].

use std::sync::Arc;

use parking_lot::Mutex;
use rdmarpc_core::{BoxStream, Request, Response, Status, Streaming};
use tokio::sync::broadcast;

use crate::chat::chat_server::Chat;
use crate::chat::{event, Event, Post};

/// Events a member may fall behind before it is ended.
pub const CHAT_BACKLOG: usize = 256;
/// The longest post, in bytes.
pub const MAX_POST: usize = 4096;
/// The longest member name, in bytes.
pub const MAX_NAME: usize = 64;
/// The request metadata key naming the member.
pub const NAME_KEY: &str = "chat-name";

/// One chat room: a bidirectional stream per member. Each member's stream reads its
/// posts and writes the room's events; the room is a ring of [`CHAT_BACKLOG`] events, so
/// a member that does not read costs the room nothing beyond it.
#[derive(Debug, Clone)]
pub struct ChatRoom {
    room: Arc<Room>,
}

#[derive(Debug)]
struct Room {
    events: broadcast::Sender<Event>,
    /// The last event number; locked while numbering and sending, so that numbers and
    /// order agree.
    seq: Mutex<u64>,
}

impl Default for ChatRoom {
    fn default() -> Self {
        ChatRoom {
            room: Arc::new(Room {
                events: broadcast::Sender::new(CHAT_BACKLOG),
                seq: Mutex::new(0),
            }),
        }
    }
}

impl Room {
    fn announce(&self, from: &str, text: String, kind: event::Kind) {
        let mut seq = self.seq.lock();
        *seq += 1;
        let _ = self.events.send(Event {
            seq: *seq,
            from: from.to_owned(),
            text,
            kind: kind as i32,
        });
    }
}

/// A member in the room; announces its leaving when dropped (however the call ended).
struct Member {
    room: Arc<Room>,
    name: String,
}

impl Drop for Member {
    fn drop(&mut self) {
        self.room
            .announce(&self.name, String::new(), event::Kind::Left);
    }
}

/// What a member's response stream holds between events.
struct State {
    member: Member,
    posts: Streaming<Post>,
    events: broadcast::Receiver<Event>,
    /// The member ended its posts: it gets no more events.
    done: bool,
}

impl Chat for ChatRoom {
    type JoinStream = BoxStream<Event>;

    async fn join(
        &self,
        request: Request<Streaming<Post>>,
    ) -> Result<Response<Self::JoinStream>, Status> {
        let name = request
            .metadata()
            .get(NAME_KEY)
            .unwrap_or_default()
            .to_owned();
        if name.is_empty() || name.len() > MAX_NAME {
            return Err(Status::invalid_argument(format!(
                "the {NAME_KEY} metadata must name the member in 1 to {MAX_NAME} bytes"
            )));
        }
        // Subscribed before announcing, so that the member sees its own joining.
        let events = self.room.events.subscribe();
        self.room
            .announce(&name, String::new(), event::Kind::Joined);
        let state = State {
            member: Member {
                room: self.room.clone(),
                name,
            },
            posts: request.into_inner(),
            events,
            done: false,
        };
        let stream = futures_util::stream::unfold(state, |mut state| async move {
            if state.done {
                return None;
            }
            loop {
                tokio::select! {
                    post = state.posts.message() => match post {
                        Ok(Some(post)) if post.text.len() > MAX_POST => {
                            state.done = true;
                            let status = Status::invalid_argument(format!(
                                "a post of {} bytes exceeds {MAX_POST}", post.text.len()
                            ));
                            return Some((Err(status), state));
                        }
                        Ok(Some(post)) => {
                            let room = &state.member.room;
                            room.announce(&state.member.name, post.text, event::Kind::Posted);
                        }
                        Ok(None) => return None,
                        Err(status) => {
                            state.done = true;
                            return Some((Err(status), state));
                        }
                    },
                    event = state.events.recv() => match event {
                        Ok(event) => return Some((Ok(event), state)),
                        Err(broadcast::error::RecvError::Lagged(missed)) => {
                            state.done = true;
                            let status = Status::resource_exhausted(format!(
                                "fell {missed} events behind the room"
                            ));
                            return Some((Err(status), state));
                        }
                        Err(broadcast::error::RecvError::Closed) => return None,
                    },
                }
            }
        });
        Ok(Response::new(Box::pin(stream)))
    }
}
