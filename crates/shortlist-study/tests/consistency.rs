//! Every statement of a record's performance and cost sections is derived from the per-step
//! figures printed beside it: property tests over generated sweeps (steps that pass, fail or are
//! client-bound) hold the capacity, the knee, the overload sentence, the excluded steps and the
//! cost to the steps' own numbers.

use proptest::prelude::*;
use shortlist_measure::analyze::{AnalyzeOptions, analyze};
use shortlist_measure::slo::Slo;
use shortlist_study::assemble::{RecordInputs, assemble_record};
use shortlist_study::performance::{Measured, StepReport};
use shortlist_study::record::Cost;
use shortlist_study::study::Study;

const STUDY: &str = r#"
format = "shortlist.study.v1"
name = "s"
question = "Which model?"
evalset = { path = "e.yaml", sha256 = "0000000000000000000000000000000000000000000000000000000000000000" }
workload = { kind = "uniform", requests = 120, input_tokens = 12000, output_tokens = 1200, rate_rps = 1.0, seed = 1 }
slo = { name = "chat", ttft_ms = 2000 }
traffic = { ordinary_rps = 0.5, peak_rps = 1.0 }
memory = { context_tokens = 4096, concurrency = 4, device = "cpu", device_memory_gib = 16.0 }

[[candidate]]
name = "c"
source = "http://127.0.0.1:9#c"
price_per_device_hour = 1.0
"#;

/// One generated step: its rate, how many of its requests meet the SLO, and whether its client
/// fell behind.
#[derive(Debug, Clone)]
struct Gen {
    rate: f64,
    qualified_share: f64,
    lagging: bool,
}

/// The records of a step: 120 requests at `rate`; the first `share` of them with a 0.1 s TTFT
/// (qualifying), the rest 5 s; each sent 50 ms late when the client lags.
fn records(g: &Gen) -> String {
    let n = 120;
    let mut text = format!(
        "{{\"format\":\"shortlist.records.v1\",\"loop\":\"open\",\"window_s\":[0,{}],\"target\":\"t\",\"trace\":\"t\"}}\n",
        n as f64 / g.rate
    );
    let good = (g.qualified_share * n as f64).round() as usize;
    for i in 0..n {
        let s = i as f64 / g.rate;
        let sent = s + if g.lagging { 0.05 } else { 0.0001 };
        let ttft = if i < good { 0.1 } else { 5.0 };
        text.push_str(&format!(
            "{{\"id\":\"r{i}\",\"scheduled_s\":{s},\"sent_s\":{sent},\"chunks\":[[{},1],[{},1]],\"last_token_s\":{},\"output_tokens\":2,\"status\":\"ok\"}}\n",
            s + ttft,
            s + ttft + 0.01,
            s + ttft + 0.01
        ));
    }
    text
}

fn step(g: &Gen, slo: &Slo) -> StepReport {
    let report = analyze(
        "step",
        records(g).as_bytes(),
        AnalyzeOptions::new(slo.clone()),
    )
    .unwrap();
    StepReport {
        offered_rps: g.rate,
        report,
    }
}

fn gen_step() -> impl Strategy<Value = Gen> {
    (
        prop::sample::select(vec![0.25, 0.5, 1.0, 2.0, 4.0, 8.0]),
        prop::sample::select(vec![1.0, 0.99, 0.9, 0.5, 0.0]),
        prop::bool::weighted(0.25),
    )
        .prop_map(|(rate, qualified_share, lagging)| Gen {
            rate,
            qualified_share,
            lagging,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn capacity_knee_overload_and_cost_read_the_steps(
        target in gen_step(),
        sweep in prop::collection::vec(gen_step(), 0..4),
        swept in prop::bool::ANY,
    ) {
        let study = Study::from_toml("s.study.toml", STUDY).unwrap();
        let locked = study.lock("2026-12-01T00:00:00Z");
        let slo = locked.study.slo().clone();
        // One step per rate: the target's rate is not swept again.
        let mut rates = vec![target.rate];
        let sweep: Vec<Gen> = sweep
            .into_iter()
            .filter(|g| {
                let new = !rates.contains(&g.rate);
                rates.push(g.rate);
                new
            })
            .collect();
        let attainment_target = locked.study.attainment_target();
        let measured = Measured::new(
            attainment_target,
            step(&target, &slo),
            vec![],
            sweep.iter().map(|g| step(g, &slo)).collect(),
            swept,
            "test backend".to_owned(),
            2.0,
        );
        let perf = measured.performance("w", "chat", target.rate, "test machine");

        // Excluded steps are exactly the client-bound ones, each says why, and judges nothing.
        for row in &perf.sweep {
            let lagging = row.offered_rps == target.rate && target.lagging
                || sweep.iter().any(|g| g.rate == row.offered_rps && g.lagging);
            prop_assert_eq!(row.excluded.is_some(), lagging, "{:?}", row);
            if let Some(why) = &row.excluded {
                prop_assert!(why.contains("client-bound"), "{}", why);
            }
        }
        let included: Vec<_> = perf.sweep.iter().filter(|r| r.excluded.is_none()).collect();
        let meets = |r: &shortlist_study::record::SweepRow| {
            r.attainment_lower_bound.is_some_and(|lb| lb >= attainment_target)
        };

        // Capacity: the highest included rate whose lower bound meets the target, once swept.
        let expected = included.iter().filter(|r| meets(r)).map(|r| r.offered_rps).fold(None, |a: Option<f64>, r| Some(a.map_or(r, |a| a.max(r))));
        prop_assert_eq!(perf.capacity_rps, if swept { expected } else { None });

        // The knee: the included step with the most goodput, none when nothing had goodput.
        if swept {
            let best = included.iter().map(|r| r.goodput_rps).fold(0.0, f64::max);
            match perf.knee_rps {
                Some(k) => {
                    let row = included.iter().find(|r| r.offered_rps == k);
                    prop_assert!(row.is_some(), "the knee is an included step");
                    prop_assert_eq!(row.unwrap().goodput_rps, best);
                    prop_assert!(best > 0.0);
                }
                None => prop_assert!(best <= 0.0, "no knee although goodput {}", best),
            }
        } else {
            prop_assert_eq!(perf.knee_rps, None);
        }

        // Overload: "not observed" exactly when every included step met the target; otherwise
        // it names the busiest included step that missed, with that step's attainment.
        let missing: Vec<_> = included.iter().filter(|r| !meets(r)).collect();
        if missing.is_empty() {
            prop_assert!(measured.overload.starts_with("not observed"), "{}", measured.overload);
        } else {
            let busiest = missing.iter().map(|r| r.offered_rps).fold(0.0, f64::max);
            let row = missing.iter().find(|r| r.offered_rps == busiest).unwrap();
            prop_assert!(measured.overload.starts_with(&format!("at {busiest} req/s offered")), "{}", measured.overload);
            let attainment = format!("attainment {:.1} %", row.attainment.unwrap() * 100.0);
            prop_assert!(measured.overload.contains(&attainment), "{} / {}", measured.overload, attainment);
        }

        // Cost: sized by exactly that capacity, or says why there is none.
        let record = assemble_record(RecordInputs {
            locked: &locked,
            candidate: &locked.study.file().candidates[0],
            generation: 1,
            identity: None,
            memory: None,
            quality: None,
            measured: Some(measured.clone()),
            machine: "test machine".to_owned(),
            code_version: "0".to_owned(),
            generated_at: "2026-12-01T00:00:00Z".to_owned(),
        });
        match (&record.cost, perf.capacity_rps) {
            (Cost::Estimate(e), Some(c)) => prop_assert_eq!(e.capacity_rps_per_replica, c),
            (Cost::Unavailable(no), None) => prop_assert!(!no.why.is_empty()),
            (cost, capacity) => prop_assert!(false, "cost {:?} with capacity {:?}", cost, capacity),
        }
        prop_assert!(record.verify());
    }
}
