//! The recording rules a history must keep, and its JSON lines.

use super::*;

fn error(lines: &[&str]) -> HistoryError {
    match check(&h(lines), &absent) {
        Ok(report) => panic!("accepted a malformed history: {report}"),
        Err(e) => e,
    }
}

#[test]
fn malformed_histories_are_errors() {
    assert!(matches!(
        error(&["1 invoke put 1", "1 ok put 1", "1 ok put 1"]),
        HistoryError::CompletionWithoutInvoke { event: 3, process: 1 }
    ));
    assert!(matches!(
        error(&["1 invoke put 1", "1 invoke get"]),
        HistoryError::InvokeWhileOutstanding {
            event: 2,
            process: 1,
            outstanding: 1
        }
    ));
    assert!(matches!(
        error(&["1 invoke put 1", "1 ok get 1"]),
        HistoryError::CompletionMismatch {
            event: 2,
            process: 1,
            invoke: 1,
            ..
        }
    ));
    assert!(matches!(
        error(&["1 invoke put 1", "1 ok put k3 1"]),
        HistoryError::CompletionMismatch { event: 2, .. }
    ));
    assert!(matches!(
        error(&["1 invoke put 1", "1 ok put 2"]),
        HistoryError::CompletionMismatch { event: 2, .. }
    ));
    assert!(matches!(
        error(&["1 invoke put 1", "1 info put 1", "1 invoke get"]),
        HistoryError::InvokeAfterInfo {
            event: 3,
            process: 1,
            info: 2
        }
    ));
    let mut backwards = h(&["1 invoke put 1", "2 invoke get", "1 ok put 1"]);
    backwards[2].time_ns = 5;
    assert!(matches!(
        check(&backwards, &absent),
        Err(HistoryError::TimeWentBackwards {
            event: 3,
            process: 1,
            previous_ns: 10,
            time_ns: 5
        })
    ));
    // Another process's earlier time is not going backwards.
    backwards[1].time_ns = 1;
    backwards[2].time_ns = 10;
    assert!(check(&backwards, &absent).is_ok());
    for bad in [
        &["1 invoke put"][..],
        &["1 invoke get 3"],
        &["1 invoke get", "1 ok get true"],
        &["1 invoke insert 1", "1 ok insert 1 nil"],
        &["1 invoke insert 1", "1 ok insert 1"],
        &["1 invoke put 1", "1 fail put 1 true"],
    ] {
        assert!(
            matches!(error(bad), HistoryError::BadField { process: 1, .. }),
            "{bad:?}"
        );
    }
    let text = "\n{\"process\":1,\"type\":\"invoke\",\"f\":\"get\",\"key\":1,\"time_ns\":1}\n{\"process\":1,\"type\":\"ok\",\"f\":\"gets\",\"key\":1,\"time_ns\":2}\n";
    let e = read_jsonl(text.as_bytes()).map(|_| ()).expect_err("bad f");
    assert!(matches!(e, HistoryError::Parse { line: 3, .. }), "{e}");
    assert!(e.to_string().starts_with("line 3:"), "{e}");
}

#[test]
fn jsonl_has_the_documented_shape() {
    let lines = [
        r#"{"process":3,"type":"invoke","f":"put","key":12,"value":99,"time_ns":123456}"#,
        r#"{"process":3,"type":"ok","f":"put","key":12,"value":99,"time_ns":123999}"#,
        r#"{"process":3,"type":"invoke","f":"get","key":12,"time_ns":124000}"#,
        r#"{"process":3,"type":"ok","f":"get","key":12,"result":99,"time_ns":124500}"#,
        r#"{"process":3,"type":"invoke","f":"get","key":12,"time_ns":124600}"#,
        r#"{"process":3,"type":"ok","f":"get","key":12,"result":null,"time_ns":124700}"#,
        r#"{"process":3,"type":"invoke","f":"insert","key":5,"value":7,"time_ns":124800}"#,
        r#"{"process":3,"type":"ok","f":"insert","key":5,"value":7,"result":false,"time_ns":124900}"#,
        r#"{"process":4,"type":"invoke","f":"delete","key":5,"time_ns":125000}"#,
        r#"{"process":4,"type":"info","f":"delete","key":5,"time_ns":125100}"#,
        r#"{"process":5,"type":"invoke","f":"update","key":5,"value":8,"time_ns":125200}"#,
        r#"{"process":5,"type":"fail","f":"update","key":5,"value":8,"time_ns":125300}"#,
    ];
    let text = lines.join("\n");
    let events = read_jsonl(text.as_bytes()).expect("parses");
    assert_eq!(events[3].result, Some(OpResult::Value(Some(99))));
    assert_eq!(events[5].result, Some(OpResult::Value(None)));
    assert_eq!(events[7].result, Some(OpResult::Wrote(false)));
    assert_eq!(events[2].result, None);
    let mut written = Vec::new();
    write_jsonl(&mut written, &events).expect("writes");
    assert_eq!(String::from_utf8(written).expect("utf-8"), text + "\n");
    // Key 12 reads a put value back but then absent: not linearizable;
    // key 5 is fine with an initially present value.
    let report = check(&events, &|k| (k == 5).then_some(1)).expect("well-formed");
    assert_eq!(
        report.non_linearizable.iter().map(|d| d.key).collect::<Vec<_>>(),
        [12]
    );
    assert_eq!(
        (report.ok, report.fail, report.info, report.pending),
        (4, 1, 1, 0)
    );
    let json = serde_json::to_value(&report).expect("serializes");
    assert_eq!(json["verdict"], "not_linearizable");
    assert_eq!(
        json["non_linearizable"][0]["verdicts"]["cross_check"]["status"],
        "ran"
    );
}
