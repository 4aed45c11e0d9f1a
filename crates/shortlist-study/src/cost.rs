//! Cost at ordinary and peak traffic, derived from measured per-replica capacity — never from a
//! throughput figure — with the capacity and hardware printed beside it.

use serde::{Deserialize, Serialize};

/// What cost is computed from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostInputs {
    /// Highest rate one replica sustained while meeting the attainment target (req/s).
    pub capacity_rps_per_replica: f64,
    /// Devices one replica occupies (from the memory fit).
    pub devices_per_replica: u32,
    pub price_per_device_hour: f64,
    pub currency: String,
    /// Mean output tokens per request in the workload.
    pub mean_output_tokens: f64,
    pub ordinary_rps: f64,
    pub peak_rps: f64,
    /// Where the capacity was measured, e.g. "AMD EPYC, 2 cores, CPU backend".
    pub hardware: String,
    /// The serving, workload and SLO the capacity belongs to.
    pub capacity_context: String,
}

/// Cost at one traffic level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostAt {
    pub rate_rps: f64,
    pub replicas: u64,
    pub devices: u64,
    pub cost_per_hour: f64,
    pub cost_per_million_requests: f64,
    /// `None` when the workload has no output tokens.
    pub cost_per_million_output_tokens: Option<f64>,
}

/// Cost at ordinary and peak traffic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostEstimate {
    pub ordinary: CostAt,
    pub peak: CostAt,
    pub capacity_rps_per_replica: f64,
    pub devices_per_replica: u32,
    pub price_per_device_hour: f64,
    pub currency: String,
    pub hardware: String,
    pub capacity_context: String,
    pub rule: String,
}

/// Why no cost can be given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoCost {
    pub why: String,
}

/// Cost at both traffic levels, or why it cannot be computed (no measured capacity).
pub fn estimate(inputs: &CostInputs) -> Result<CostEstimate, NoCost> {
    if !(inputs.capacity_rps_per_replica.is_finite() && inputs.capacity_rps_per_replica > 0.0) {
        return Err(NoCost {
            why: "no rate met the attainment target in the capacity sweep, so no number of replicas holds the SLO".to_owned(),
        });
    }
    let at = |rate: f64| {
        let replicas = (rate / inputs.capacity_rps_per_replica).ceil().max(1.0) as u64;
        let devices = replicas * u64::from(inputs.devices_per_replica);
        let per_hour = devices as f64 * inputs.price_per_device_hour;
        let requests_per_hour = rate * 3600.0;
        CostAt {
            rate_rps: rate,
            replicas,
            devices,
            cost_per_hour: per_hour,
            cost_per_million_requests: per_hour / requests_per_hour * 1e6,
            cost_per_million_output_tokens: (inputs.mean_output_tokens > 0.0)
                .then(|| per_hour / (requests_per_hour * inputs.mean_output_tokens) * 1e6),
        }
    };
    Ok(CostEstimate {
        ordinary: at(inputs.ordinary_rps),
        peak: at(inputs.peak_rps),
        capacity_rps_per_replica: inputs.capacity_rps_per_replica,
        devices_per_replica: inputs.devices_per_replica,
        price_per_device_hour: inputs.price_per_device_hour,
        currency: inputs.currency.clone(),
        hardware: inputs.hardware.clone(),
        capacity_context: inputs.capacity_context.clone(),
        rule: "replicas = ⌈rate / measured capacity per replica⌉ (capacity: highest swept rate whose attainment lower bound met the target); devices = replicas × devices per replica; cost per hour = devices × price".to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_follow_capacity_not_throughput() {
        let inputs = CostInputs {
            capacity_rps_per_replica: 4.0,
            devices_per_replica: 2,
            price_per_device_hour: 3.0,
            currency: "USD".into(),
            mean_output_tokens: 200.0,
            ordinary_rps: 3.0,
            peak_rps: 10.0,
            hardware: "test".into(),
            capacity_context: "practice uniform trace, chat SLO".into(),
        };
        let c = estimate(&inputs).unwrap();
        assert_eq!((c.ordinary.replicas, c.ordinary.devices), (1, 2));
        assert_eq!((c.peak.replicas, c.peak.devices), (3, 6));
        assert_eq!(c.ordinary.cost_per_hour, 6.0);
        // 6 per hour over 10,800 requests per hour.
        assert!((c.ordinary.cost_per_million_requests - 6.0 / 10_800.0 * 1e6).abs() < 1e-9);
        assert!(
            (c.peak.cost_per_million_output_tokens.unwrap() - 18.0 / (36_000.0 * 200.0) * 1e6)
                .abs()
                < 1e-9
        );
        assert!(
            estimate(&CostInputs {
                capacity_rps_per_replica: 0.0,
                ..inputs
            })
            .is_err()
        );
    }
}
