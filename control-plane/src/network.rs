//! Raft RPCs between members over HTTP/JSON (written next).
