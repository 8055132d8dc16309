//! Tests of the topic administration APIs' authorization.

use super::super::testing::*;
use super::*;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::create_topics_response::CreatableTopicConfigs;
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    CreateTopicsRequest, DeleteRecordsRequest, DeleteTopicsRequest, DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
};

#[test]
fn create_topics_per_topic_and_configs_need_describe_configs() {
    let authz = AllowList::new()
        .allow(AclOperation::Create, ResourceType::Topic, "a")
        .arc();
    for version in [2, 4, 5, 7] {
        let req = CreateTopicsRequest::default().with_topics(
            ["a", "b"]
                .iter()
                .map(|n| {
                    CreatableTopic::default()
                        .with_name(topic_name(n))
                        .with_num_partitions(3)
                        .with_replication_factor(1)
                        .with_configs(vec![CreatableTopicConfig::default()
                            .with_name(text("retention.ms"))
                            .with_value(Some(text("1")))])
                })
                .collect(),
        );
        let (out, plan) = forwarded(&run(&authz, &frame(ApiKey::CreateTopics, version, &req)));
        let sent: CreateTopicsRequest = request_body(&out);
        assert_eq!(sent.topics.len(), 1, "v{version}");
        assert_eq!(sent.topics[0].name.0.as_str(), "a");
        let mut created = CreatableTopicResult::default().with_name(topic_name("a"));
        if version >= 5 {
            created.configs = Some(vec![CreatableTopicConfigs::default().with_name(text("x"))]);
        }
        let upstream = CreateTopicsResponse::default().with_topics(vec![created]);
        let merged: CreateTopicsResponse = applied(&plan, ApiKey::CreateTopics, version, &upstream);
        assert_eq!(merged.topics[1].name.0.as_str(), "b");
        assert_eq!(merged.topics[1].error_code, 29);
        if version >= 5 {
            assert_eq!(merged.topics[0].configs, None);
            assert_eq!(merged.topics[0].topic_config_error_code, 29);
        }
    }
}

#[test]
fn delete_topics_by_name_and_by_id() {
    let authz = AllowList::new()
        .allow(AclOperation::Delete, ResourceType::Topic, "a")
        .arc();
    for version in [1, 3, 4, 5] {
        let req =
            DeleteTopicsRequest::default().with_topic_names(vec![topic_name("a"), topic_name("b")]);
        let (out, plan) = forwarded(&run(&authz, &frame(ApiKey::DeleteTopics, version, &req)));
        let sent: DeleteTopicsRequest = request_body(&out);
        assert_eq!(sent.topic_names, vec![topic_name("a")]);
        let merged: DeleteTopicsResponse = applied(
            &plan,
            ApiKey::DeleteTopics,
            version,
            &DeleteTopicsResponse::default(),
        );
        assert_eq!(merged.responses[0].name, Some(topic_name("b")));
        assert_eq!(merged.responses[0].error_code, 29);
    }
    let mut by_id = DeleteTopicState::default().with_name(Some(topic_name("a")));
    by_id.topic_id = TryFrom::try_from(vec![9u8; 16]).unwrap();
    let req = DeleteTopicsRequest::default().with_topics(vec![
        DeleteTopicState::default().with_name(Some(topic_name("a"))),
        by_id,
    ]);
    let (out, plan) = forwarded(&run(&authz, &frame(ApiKey::DeleteTopics, 6, &req)));
    let sent: DeleteTopicsRequest = request_body(&out);
    assert_eq!(sent.topics.len(), 1);
    assert_eq!(sent.topics[0].name, Some(topic_name("a")));
    let merged: DeleteTopicsResponse = applied(
        &plan,
        ApiKey::DeleteTopics,
        6,
        &DeleteTopicsResponse::default(),
    );
    assert_eq!(merged.responses[0].name, None);
    assert_eq!(merged.responses[0].topic_id.as_bytes(), &[9u8; 16]);
    assert_eq!(merged.responses[0].error_code, 29);
}

#[test]
fn delete_records_per_topic() {
    let authz = AllowList::new().arc();
    let req = DeleteRecordsRequest::default().with_topics(vec![DeleteRecordsTopic::default()
        .with_name(topic_name("a"))
        .with_partitions(vec![
            DeleteRecordsPartition::default().with_partition_index(4)
        ])]);
    for version in [0, 1, 2] {
        let r: DeleteRecordsResponse = response_body(
            ApiKey::DeleteRecords,
            version,
            &responded(&run(&authz, &frame(ApiKey::DeleteRecords, version, &req))),
        );
        assert_eq!(r.topics[0].partitions[0].partition_index, 4);
        assert_eq!(r.topics[0].partitions[0].error_code, 29);
    }
}

#[test]
fn config_resources_map_to_their_acl_resources() {
    let authz = AllowList::new()
        .allow(AclOperation::DescribeConfigs, ResourceType::Topic, "a")
        .allow(AclOperation::AlterConfigs, ResourceType::Group, "g")
        .arc();
    let resource = |t: i8, n: &str| {
        DescribeConfigsResource::default()
            .with_resource_type(t)
            .with_resource_name(text(n))
    };
    for version in [1, 3, 4] {
        let req = DescribeConfigsRequest::default().with_resources(vec![
            resource(2, "a"),
            resource(2, "b"),
            resource(4, "1"),
            resource(32, "g"),
        ]);
        let (out, plan) = forwarded(&run(&authz, &frame(ApiKey::DescribeConfigs, version, &req)));
        let sent: DescribeConfigsRequest = request_body(&out);
        assert_eq!(sent.resources.len(), 2, "v{version}");
        assert_eq!(sent.resources[1].resource_type, 32); // ALTER_CONFIGS implies DESCRIBE_CONFIGS
        let merged: DescribeConfigsResponse = applied(
            &plan,
            ApiKey::DescribeConfigs,
            version,
            &DescribeConfigsResponse::default(),
        );
        let got: Vec<_> = merged
            .results
            .iter()
            .map(|r| (r.resource_type, r.error_code))
            .collect();
        assert_eq!(got, [(2, 29), (4, 31)]);
    }
    for version in [0, 1] {
        let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(text("a"))
                .with_configs(vec![AlterableConfig::default().with_name(text("x"))]),
        ]);
        let r: IncrementalAlterConfigsResponse = response_body(
            ApiKey::IncrementalAlterConfigs,
            version,
            &responded(&run(
                &authz,
                &frame(ApiKey::IncrementalAlterConfigs, version, &req),
            )),
        );
        assert_eq!(r.responses[0].error_code, 29);
    }
}
