//! The latency sampler.
pub struct SampleConfig;
pub struct SampleRecord;
pub struct SampleResults;
pub fn sample() {}
