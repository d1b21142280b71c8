//! A client that loses its connections in the middle of a commit, over
//! tcp, at every verb (issue 19, item 5): part of a batch that spans nodes
//! may have run, the client sees `Disconnected`, reconnects on its next
//! batch, finishes whatever its log left, and commits again. Nothing
//! acknowledged is lost, nothing is half done, and the replicas agree; and
//! a cut that let the commit happen is one the client reports in doubt
//! (`TxClient::take_commit_in_doubt`), so that no caller runs it again.

mod common;

use common::{marks, spread, Cluster};
use fabric::{FabricError, FaultPlan};
use txn::word::LogState;
use txn::TxError;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_cut_off_at_any_verb_is_finished_and_the_client_commits_again() {
    for rf in [2u16, 3] {
        let m = marks(2, u64::from(rf), true);
        for k in 1..=m.end {
            let what = format!("rf {rf}, connections dropped after verb {k}");
            let cluster = Cluster::new_tcp(rf).await;
            let objs = cluster.accounts(&[100, 100]).await;
            let (mut c, faults) = cluster.faulty(
                1,
                FaultPlan {
                    drop_after_verbs: Some(k),
                    ..FaultPlan::default()
                },
            );
            let first = spread(&mut c, objs.clone()).await;
            assert!(faults.crashed().is_none(), "{what}");
            let acknowledged = match first {
                Ok(()) => true,
                // Not acknowledged: it committed if it reached DOING, and
                // then the client itself must finish installing it.
                Err(TxError::Fabric(FabricError::Disconnected { .. })) => false,
                Err(e) => panic!("{what}: {e}"),
            };
            // Whether the client may not know the outcome: it must, for every
            // cut that let the commit happen (checked below).
            let in_doubt = c.take_commit_in_doubt();
            // The same client goes on, without anyone else's help.
            spread(&mut c, objs.clone())
                .await
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(!c.log_open(), "{what}: the client settled its log");
            let after = cluster.read_all(9, &objs).await;
            if acknowledged {
                assert_eq!(after, vec![80, 120], "{what}");
            } else {
                assert!(
                    after == vec![80, 120] || after == vec![90, 110],
                    "{what}: {after:?}"
                );
                assert!(
                    in_doubt || after == vec![90, 110],
                    "{what}: the cut-off commit happened but was not reported in doubt"
                );
            }
            cluster.assert_unlocked(&objs).await;
            for &o in &objs {
                cluster.replicated_value(o).await;
            }
            let headers = cluster.log_headers(1).await;
            assert!(
                headers.iter().all(|h| h.state() == LogState::Done),
                "{what}: {headers:?}"
            );
            assert!(headers.iter().all(|h| *h == headers[0]), "{what}: {headers:?}");
        }
    }
}
