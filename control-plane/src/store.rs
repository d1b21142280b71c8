//! The Raft log, vote and state machine in sled (written next).
