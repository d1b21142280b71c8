//! What a service owner writes: join the cluster, open a B+tree by name,
//! write, read, scan, and handle a write the index refuses.
//!
//! ```text
//! kintsugi cluster up --detach
//! cargo run --release --example orders -- --dir kintsugi-cluster
//! kintsugi cluster down
//! ```
//!
//! `--dir` reads the endpoints and the client token from the directory of
//! a `kintsugi cluster up`; `--endpoints A,B,C --token T` names them.

use std::error::Error;

use kintsugi::cluster::{Cluster, ClusterOptions, Written};

/// Joins, opens "orders", and shows every kind of operation.
pub async fn run(endpoints: &[String], token: &str, replicas: u8) -> Result<(), Box<dyn Error>> {
    let options = ClusterOptions {
        name: "orders-example".into(),
        replicas,
        ..ClusterOptions::default()
    };
    let cluster = Cluster::connect_with(endpoints, token, options).await?;
    println!(
        "joined as client {} (owner ids {:?})",
        cluster.id(),
        cluster.owner_ids()
    );

    // Created on first open (rtx, `replicas` copies), opened after that.
    let mut orders = cluster.btree("orders").await?;
    for id in 1..=100u64 {
        orders.put(id, id * 100).await?; // order id → amount in cents
    }
    println!("order 42: {:?}", orders.get(42).await?);
    let page = orders.scan(40, 5).await?;
    println!("orders 40..45: {page:?}");

    // A write that finds its precondition false writes nothing, and says so.
    match orders.insert(42, 1).await? {
        Written::Unchanged => println!(
            "insert of order 42 refused: it exists (amount still {:?})",
            orders.get(42).await?
        ),
        other => return Err(format!("order 42 existed, yet insert said {other:?}").into()),
    }
    // Key 0 is reserved: an error, and nothing is written.
    match orders.put(0, 1).await {
        Err(e) => println!("put of key 0 refused: {e}"),
        Ok(w) => return Err(format!("key 0 was accepted ({w:?})").into()),
    }
    orders.delete(100).await?;
    println!("order 100 after delete: {:?}", orders.get(100).await?);

    drop(orders);
    cluster.close().await?; // logs finished, owner ids given back
    println!("left the cluster");
    Ok(())
}

/// Endpoints, token and replication from a `cluster up` directory.
pub fn from_dir(dir: &std::path::Path) -> Result<(Vec<String>, String, u8), Box<dyn Error>> {
    let text = std::fs::read_to_string(dir.join("cluster.json")).map_err(|e| {
        format!(
            "cannot read {}/cluster.json (is a cluster up there?): {e}",
            dir.display()
        )
    })?;
    let file: kintsugi::harness::local::ClusterFile = serde_json::from_str(&text)?;
    Ok((file.control, file.client_token, file.replicas))
}

#[allow(dead_code)] // a test includes this file for `run`
#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let (endpoints, token, replicas) = match (value("--dir"), value("--endpoints"), value("--token")) {
        (Some(dir), None, None) => from_dir(std::path::Path::new(&dir))?,
        (None, Some(e), Some(t)) => (e.split(',').map(str::to_owned).collect(), t, 1),
        _ => {
            eprintln!("usage: orders --dir CLUSTER_DIR | --endpoints A,B,C --token TOKEN");
            std::process::exit(2);
        }
    };
    run(&endpoints, &token, replicas).await
}
