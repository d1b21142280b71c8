//! `TxConfig` as an operator writes it: TOML with humantime durations.
//! (config.rs unit-tests the defaults and single fields; this checks a whole
//! file, the round trip through serialisation, and what the lease becomes.)

use std::time::Duration;

use txn::TxConfig;

#[test]
fn a_full_config_parses_and_round_trips() {
    let text = r#"
        op_time = "250us"
        drift = "5ms"
        opt1 = false
        attempts_max = 50
        backoff_min = "1us"
        backoff_max = "2ms 500us"
    "#;
    let c: TxConfig = toml::from_str(text).unwrap();
    assert_eq!(
        c,
        TxConfig {
            op_time: Duration::from_micros(250),
            drift: Duration::from_millis(5),
            opt1: false,
            attempts_max: 50,
            backoff_min: Duration::from_micros(1),
            backoff_max: Duration::from_micros(2_500),
            repair: true,
        }
    );
    // n * OP_TIME + DRIFT, in lease ticks of 1/256 ms, rounded up:
    // 5.25 ms, 6 ms, 6.25 ms and 5.1 ms + 1 ns (1305.6 ticks + a bit).
    assert_eq!(c.lease_ticks(1), 1344);
    assert_eq!(c.lease_ticks(4), 1536);
    assert_eq!(c.lease_ticks(5), 1600);
    let odd = TxConfig {
        op_time: Duration::from_micros(100),
        drift: Duration::from_nanos(5_000_001),
        ..c.clone()
    };
    assert_eq!(odd.lease_ticks(1), 1306);
    assert_eq!(
        txn::lease::duration_from_ticks(c.lease_ticks(5)),
        Duration::from_micros(6_250)
    );
    let written = toml::to_string(&c).unwrap();
    assert!(written.contains("op_time = \"250us\""), "{written}");
    assert_eq!(toml::from_str::<TxConfig>(&written).unwrap(), c);
}

#[test]
fn an_empty_config_is_the_paper_s() {
    let c: TxConfig = toml::from_str("").unwrap();
    assert_eq!(c, TxConfig::default());
    assert_eq!(
        (c.op_time, c.drift),
        (Duration::from_micros(100), Duration::from_millis(8))
    );
    assert_eq!(c.lease_ticks(1), 2074, "8.1 ms = 2073.6 ticks, rounded up");
}

#[test]
fn bad_durations_and_unknown_keys_are_refused() {
    for bad in [
        "op_time = 100",
        "drift = \"8 parsecs\"",
        "backoff_max = \"\"",
        "lease = \"9ms\"",
    ] {
        assert!(toml::from_str::<TxConfig>(bad).is_err(), "{bad}");
    }
}
