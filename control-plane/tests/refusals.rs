//! A command the state machine refuses is answered from the leader's
//! applied state, not proposed: a caller that retries a refusal in a loop
//! (a recovery coordinator, a memory node registering again) must not grow
//! the Raft log (issue 46: the same refusal committed 14,106 times).

mod common;

use common::Cluster;
use control_plane::api::ClientError;
use control_plane::state::{ClientState, Command, Outcome};

/// Refusals sent in a row: far more than any test of a growing log needs.
const REFUSALS: usize = 50;

/// The leader's last log index, once every member has applied it.
async fn settled_log_index(c: &Cluster) -> u64 {
    let leader = c.leader().await;
    let index = c.applied(leader);
    c.wait_applied(index).await;
    let last = c.member(leader).raft().metrics().borrow().last_log_index;
    last.unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_command_is_not_committed_however_often_it_is_sent() {
    let c = Cluster::start(1).await;
    let leader = c.leader().await;
    // A client with the longest lease (nobody renews it, and the judge must
    // not expire it during the test), expired by hand: forgetting it is
    // refused until its quarantine is over, a refusal that depends on the
    // request's time.
    let Ok(Outcome::Client(client)) = c
        .write(
            leader,
            &Command::RegisterClient {
                name: "quarantined".into(),
                owner_ids: 1,
                lease_ms: control_plane::state::LEASE_MS_MAX,
            },
        )
        .await
    else {
        panic!("register a client")
    };
    c.write(leader, &Command::ExpireClient { id: client.id })
        .await
        .expect("expire it");
    let before = settled_log_index(&c).await;
    let refused = [
        (Command::DrainMemNode { id: 77 }, 404),
        (Command::EvictReplica { region: 9, node: 0 }, 404),
        (
            Command::RegisterClient {
                name: String::new(),
                owner_ids: 1,
                lease_ms: 100,
            },
            400,
        ),
        (
            Command::ForgetClient {
                id: client.id,
                by: None,
            },
            409,
        ),
    ];
    let api = c.client(leader);
    for i in 0..REFUSALS {
        let (command, status) = &refused[i % refused.len()];
        match api.command(command).await {
            Err(ClientError::Refused { status: s, .. }) => assert_eq!(s.as_u16(), *status, "{command:?}"),
            other => panic!("{command:?} must be refused: {other:?}"),
        }
    }
    assert_eq!(
        settled_log_index(&c).await,
        before,
        "{REFUSALS} refusals left the log as it was"
    );
    let state = c.member(leader).state().state();
    assert!(matches!(
        state.clients[&client.id].state,
        ClientState::Expired { .. }
    ));
    // A command that applies is still committed, once.
    c.write(leader, &Command::DeregisterClient { id: 77 })
        .await
        .expect_err("unknown client");
    c.write(
        leader,
        &Command::RegisterClient {
            name: "accepted".into(),
            owner_ids: 1,
            lease_ms: control_plane::state::LEASE_MS_MAX,
        },
    )
    .await
    .expect("register");
    assert_eq!(settled_log_index(&c).await, before + 1);
    c.stop().await;
}
