//! The `kintsugi memnode` process: persistence across a crash, clean
//! shutdown, epoch fencing and refusal of bad arguments.

mod support;

use fabric::{Batch, Client, FabricError, GlobalAddr, ShmTransport, TcpTransport};
use support::{kintsugi, path_str, MemnodeProcess};

const PATTERN: &[u8] = b"survives kill -9 because it was flushed";

async fn connect(node: &MemnodeProcess) -> Client {
    let (transport, map) =
        TcpTransport::discover_with(std::slice::from_ref(&node.addr), support::tcp_options())
            .await
            .unwrap();
    Client::new(map, transport.into())
}

#[tokio::test]
async fn persisted_regions_survive_a_crash_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mn.img");
    let args = [
        "--region",
        "1:1MiB",
        "--region",
        "2:64KiB",
        "--persist",
        path_str(&file),
        "--epoch",
        "3",
    ];
    let at = GlobalAddr::new(2, 1000);

    let node = MemnodeProcess::start(&args);
    let mut client = connect(&node).await;
    let mut batch = Batch::new();
    batch.write(at, PATTERN);
    let flush = batch.flush(at, PATTERN.len() as u32);
    client.execute(&mut batch).await.unwrap();
    batch.done(flush).unwrap();
    let key_before = client.map().region(2).unwrap().replicas[0].key;
    node.crash();

    let node = MemnodeProcess::start(&args);
    let mut client = connect(&node).await;
    assert_eq!(client.map().epoch(), 3);
    assert_eq!(client.map().region(2).unwrap().replicas[0].key, key_before);
    batch.clear();
    let read = batch.read(at, PATTERN.len() as u32);
    client.execute(&mut batch).await.unwrap();
    assert_eq!(batch.read_result(read).unwrap(), PATTERN);
    assert!(node.terminate().success());
    assert!(file.exists(), "a persistent image outlives its node");

    // Restarting with other regions is refused, and names both layouts.
    let (code, _, stderr) = kintsugi(&[
        "memnode",
        "--listen",
        "127.0.0.1:0",
        "--region",
        "1:2MiB",
        "--persist",
        path_str(&file),
    ]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("holds regions") && stderr.contains("1:2097152"),
        "{stderr}"
    );
}

#[tokio::test]
async fn shm_image_is_shared_while_serving_and_removed_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("shm-image");
    let node = MemnodeProcess::start(&["--region", "1:64KiB", "--shm", path_str(&image)]);
    assert!(image.exists());

    // A write through shm is visible through tcp: the same memory.
    let (transport, map) = ShmTransport::attach(std::slice::from_ref(&image)).unwrap();
    let mut shm_client = Client::new(map, transport.into());
    let mut batch = Batch::new();
    batch.write(GlobalAddr::new(1, 8), b"via shm");
    shm_client.execute(&mut batch).await.unwrap();
    let mut tcp_client = connect(&node).await;
    batch.clear();
    let read = batch.read(GlobalAddr::new(1, 8), 7);
    tcp_client.execute(&mut batch).await.unwrap();
    assert_eq!(batch.read_result(read).unwrap(), b"via shm");
    drop(shm_client);

    assert!(node.terminate().success(), "SIGTERM is a clean stop");
    assert!(!image.exists(), "the shm image is removed on a clean stop");
}

#[tokio::test]
async fn a_client_with_an_older_epoch_is_fenced() {
    let node = MemnodeProcess::start(&["--region", "1:4KiB", "--epoch", "5"]);
    let mut current = connect(&node).await;
    assert_eq!(current.map().epoch(), 5);
    let mut stale = current.fork();
    stale.set_map(current.map().with_epoch(4));

    let mut batch = Batch::new();
    batch.faa(GlobalAddr::new(1, 0), 1);
    match stale.execute(&mut batch).await {
        Err(FabricError::StaleEpoch {
            client_epoch: 4,
            node_epoch: 5,
            ..
        }) => {}
        other => panic!("expected a stale-epoch refusal, got {other:?}"),
    }
    batch.clear();
    let h = batch.faa(GlobalAddr::new(1, 0), 1);
    current.execute(&mut batch).await.unwrap();
    assert_eq!(batch.old_value(h), Ok(0), "the fenced FAA did not run");
    assert!(node.terminate().success());
}

#[test]
fn bad_arguments_get_clear_errors() {
    let cases: &[(&[&str], &str)] = &[
        (&["memnode", "--listen", "127.0.0.1:0"], "--region"),
        (
            &["memnode", "--listen", "127.0.0.1:0", "--region", "1:12"],
            "multiple of 8",
        ),
        (
            &["memnode", "--listen", "127.0.0.1:0", "--region", "one:1MiB"],
            "region id",
        ),
        (
            &["memnode", "--listen", "127.0.0.1:0", "--region", "1:lots"],
            "not a size",
        ),
        (
            &[
                "memnode",
                "--listen",
                "127.0.0.1:0",
                "--region",
                "1:8",
                "--region",
                "1:8",
            ],
            "given twice",
        ),
        (
            &[
                "memnode",
                "--listen",
                "not-an-address",
                "--region",
                "1:8",
                "--insecure-open",
            ],
            "cannot listen",
        ),
        (
            &[
                "memnode",
                "--listen",
                "127.0.0.1:0",
                "--region",
                "1:8",
                "--shm",
                "/a",
                "--persist",
                "/b",
            ],
            "cannot be used with",
        ),
    ];
    // Without a secret (and without --insecure-open), a node with its own
    // regions would admit nobody it could check: refused, with the remedy.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kintsugi"))
        .args(["memnode", "--listen", "127.0.0.1:0", "--region", "1:8"])
        .env_remove(control_plane::config::SECRET_ENV)
        .output()
        .expect("run kintsugi");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("set KINTSUGI_CLUSTER_SECRET"),
        "{stderr}"
    );
    for (args, needle) in cases {
        let (code, _, stderr) = kintsugi(args);
        assert_ne!(code, 0, "{args:?} should fail");
        assert!(
            stderr.contains(needle),
            "{args:?}: stderr lacks {needle:?}:\n{stderr}"
        );
    }
}
