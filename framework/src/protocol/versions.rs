//! The API versions Portcullis advertises: for each API, the intersection of what Portcullis can
//! handle and what the upstream cluster supports.

use std::collections::BTreeMap;

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};

use super::api::{self, LOCAL_APIS};

/// KIP-951: from Produce v10 and Fetch v16 a NOT_LEADER_OR_FOLLOWER response carries the new
/// leader's `NodeEndpoints` (host and port). Those would hand clients the upstream brokers' real
/// addresses (librdkafka follows them at once, and resends the batch there), so rather than
/// rewriting every Produce and Fetch response on the hot path, the versions that carry them are
/// not advertised; clients fall back to a Metadata refresh, which is rewritten.
pub const PRODUCE_MAX_WITHOUT_NODE_ENDPOINTS: i16 = 9;
/// See [`PRODUCE_MAX_WITHOUT_NODE_ENDPOINTS`].
pub const FETCH_MAX_WITHOUT_NODE_ENDPOINTS: i16 = 15;

/// Supported version ranges by API key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApiVersionTable {
    ranges: BTreeMap<i16, (i16, i16)>,
}

impl ApiVersionTable {
    /// A table from `(api_key, min, max)` triples.
    pub fn from_ranges(ranges: impl IntoIterator<Item = (i16, i16, i16)>) -> Self {
        Self {
            ranges: ranges
                .into_iter()
                .map(|(k, min, max)| (k, (min, max)))
                .collect(),
        }
    }

    /// What Portcullis advertises in front of an upstream that supports `upstream`:
    /// - the local APIs with the versions Portcullis speaks;
    /// - every other API the upstream supports that is not a security API, clamped to the versions
    ///   kafka-protocol knows (so any message Portcullis may have to read is one it can parse).
    pub fn advertised(upstream: &ApiVersionTable) -> Self {
        Self::advertised_with(upstream, std::iter::empty())
    }

    /// Like [`ApiVersionTable::advertised`], plus further locally served APIs `(key, min, max)`.
    pub fn advertised_with(
        upstream: &ApiVersionTable,
        local: impl IntoIterator<Item = (i16, i16, i16)>,
    ) -> Self {
        let mut ranges = BTreeMap::new();
        for &(key, min, max) in LOCAL_APIS {
            ranges.insert(key, (min, max));
        }
        for (key, min, max) in local {
            ranges.insert(key, (min, max));
        }
        for (&key, &(up_min, up_max)) in &upstream.ranges {
            if api::is_security_api(key) {
                continue;
            }
            let Ok(known) = ApiKey::try_from(key) else {
                continue;
            };
            let ours = known.valid_versions();
            let ours_max = match key {
                api::PRODUCE => ours.max.min(PRODUCE_MAX_WITHOUT_NODE_ENDPOINTS),
                api::FETCH => ours.max.min(FETCH_MAX_WITHOUT_NODE_ENDPOINTS),
                _ => ours.max,
            };
            let (min, max) = (up_min.max(ours.min), up_max.min(ours_max));
            if min <= max {
                ranges.insert(key, (min, max));
            }
        }
        Self { ranges }
    }

    /// The supported range for an API.
    pub fn range(&self, api_key: i16) -> Option<(i16, i16)> {
        self.ranges.get(&api_key).copied()
    }

    /// Whether `version` of `api_key` is supported.
    pub fn supports(&self, api_key: i16, version: i16) -> bool {
        self.range(api_key)
            .is_some_and(|(min, max)| (min..=max).contains(&version))
    }

    /// The number of APIs.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Iterates `(api_key, min, max)`.
    pub fn iter(&self) -> impl Iterator<Item = (i16, i16, i16)> + '_ {
        self.ranges.iter().map(|(&k, &(min, max))| (k, min, max))
    }

    /// Reads the table from an upstream ApiVersions response.
    pub fn from_response(response: &ApiVersionsResponse) -> Self {
        Self::from_ranges(
            response
                .api_keys
                .iter()
                .map(|a| (a.api_key, a.min_version, a.max_version)),
        )
    }

    /// Builds the ApiVersions response body.
    pub fn to_response(&self, error_code: i16) -> ApiVersionsResponse {
        let api_keys = self
            .iter()
            .map(|(key, min, max)| {
                ApiVersion::default()
                    .with_api_key(key)
                    .with_min_version(min)
                    .with_max_version(max)
            })
            .collect();
        ApiVersionsResponse::default()
            .with_error_code(error_code)
            .with_api_keys(api_keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advertises_local_apis_and_the_intersection_of_the_rest() {
        let upstream = ApiVersionTable::from_ranges([
            (0, 3, 99),  // Produce: clamped to what kafka-protocol knows
            (17, 0, 1),  // SaslHandshake: ours
            (30, 0, 3),  // CreateAcls: a security API, not advertised until served locally
            (3, 0, 12),  // Metadata
            (999, 0, 1), // unknown to us: dropped
        ]);
        let t = ApiVersionTable::advertised(&upstream);
        assert_eq!(t.range(3), Some((0, 12)));
        assert_eq!(t.range(0), Some((3, PRODUCE_MAX_WITHOUT_NODE_ENDPOINTS)));
        assert_eq!(t.range(36), Some((0, 2)));
        assert_eq!(t.range(18), Some((0, 4)));
        assert_eq!(t.range(30), None);
        assert_eq!(t.range(999), None);
    }
}
