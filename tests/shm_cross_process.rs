//! Real cross-process atomics on the `shm` transport: two processes FAA the
//! same word of one memory image a million times each.

use std::path::PathBuf;
use std::process::Command;

use fabric::{Batch, Client, GlobalAddr, MemoryNode, RegionSpec, ShmTransport};

const FAA_PER_PROCESS: u64 = 1_000_000;
const CHILD_ENV: &str = "KINTSUGI_TEST_FAA_IMAGE";
const WORD: GlobalAddr = GlobalAddr::new(1, 64);

/// Runs in the child processes only (re-executions of this test binary).
#[test]
fn faa_child() {
    let Some(image) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let (transport, map) = ShmTransport::attach(&[PathBuf::from(image)]).expect("attach");
    let mut client = Client::new(map, transport.into());
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(async {
        let mut batch = Batch::new();
        for _ in 0..FAA_PER_PROCESS {
            batch.clear();
            let h = batch.faa(WORD, 1);
            client.execute(&mut batch).await.expect("execute");
            batch.old_value(h).expect("faa completion");
        }
    });
    assert_eq!(client.stats().faa, FAA_PER_PROCESS);
    assert_eq!(client.stats().round_trips, FAA_PER_PROCESS);
}

#[test]
fn two_processes_faa_one_word() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("image");
    let node = MemoryNode::create_shm(&image, 1, &[RegionSpec { id: 1, size: 4096 }]).unwrap();
    let me = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..2)
        .map(|_| {
            Command::new(&me)
                .args(["--exact", "faa_child", "--test-threads", "1"])
                .env(CHILD_ENV, &image)
                // The children's own libtest summary would read as this run's.
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success(), "child failed");
    }
    let (transport, map) = ShmTransport::attach(std::slice::from_ref(&image)).unwrap();
    let mut client = Client::new(map, transport.into());
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let total = rt.block_on(async {
        let mut batch = Batch::new();
        let h = batch.read(WORD, 8);
        client.execute(&mut batch).await.unwrap();
        u64::from_le_bytes(batch.read_result(h).unwrap().try_into().unwrap())
    });
    assert_eq!(total, 2 * FAA_PER_PROCESS);
    drop(node);
    assert!(!image.exists(), "the shm image is removed with its node");
}
