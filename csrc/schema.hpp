// The integer codes shared by the core and Python.  Python side (same names, same
// values): fastlower/_schema.py; tests/test_schema.py parses this file and fails when
// the two drift.  Keep one `inline constexpr <type> NAME = <integer literal>;` per line.
#pragma once

#include <cstdint>

namespace fastlower {

// node.op codes
inline constexpr int32_t OP_PLACEHOLDER = 0;
inline constexpr int32_t OP_GET_ATTR = 1;
inline constexpr int32_t OP_CALL_FUNCTION = 2;
inline constexpr int32_t OP_CALL_MODULE = 3;
inline constexpr int32_t OP_CALL_METHOD = 4;
inline constexpr int32_t OP_OUTPUT = 5;

// what created a node (the simulator's kind)
inline constexpr int32_t KIND_ORIGINAL = 0;
inline constexpr int32_t KIND_CONSTANT_COPY = 1;
inline constexpr int32_t KIND_CALL_MODULE = 2;
inline constexpr int32_t KIND_GETITEM = 3;
inline constexpr int32_t KIND_GET_ATTR = 4;
inline constexpr int32_t KIND_DELEGATE = 5;

// placeholder roles (input spec kinds the contract cares about)
inline constexpr int64_t ROLE_USER_INPUT = 0;
inline constexpr int64_t ROLE_PARAMETER = 1;
inline constexpr int64_t ROLE_BUFFER = 2;
inline constexpr int64_t ROLE_CONSTANT = 3;
inline constexpr int64_t ROLE_OTHER = 4;

// output spec kinds
inline constexpr int64_t OUT_USER = 0;
inline constexpr int64_t OUT_BUFFER_MUTATION = 1;
inline constexpr int64_t OUT_OTHER = 2;

// tag ids: >= 0 indexes the tag list; these two mark the rest
inline constexpr int64_t TAG_NONE = -1;     // untagged
inline constexpr int64_t TAG_UNKNOWN = -2;  // a tag partition_tags does not name
// group_by_tag returns one list per tag: bound the output a caller can ask for (1 << 20)
inline constexpr int64_t MAX_TAGS = 1048576;

// find_contract_violation's codes: the first broken partition rule
inline constexpr int64_t CONTRACT_OK = 0;
inline constexpr int64_t CONTRACT_TAGGED_OUTPUT = 1;
inline constexpr int64_t CONTRACT_TAGGED_USER_INPUT = 2;
inline constexpr int64_t CONTRACT_UNKNOWN_TAG = 3;
inline constexpr int64_t CONTRACT_NO_COPY_SHARED = 4;

// plan_graph's stops: the broken rule the reference meets first (RuleStop.kind)
inline constexpr int64_t STOP_TAGGED_OUTPUT = 1;
inline constexpr int64_t STOP_TAGGED_USER_INPUT = 2;
inline constexpr int64_t STOP_SHARED_CONSTANT = 3;
inline constexpr int64_t STOP_CYCLE = 4;
inline constexpr int64_t STOP_NO_OUTPUT = 5;
inline constexpr int64_t STOP_MUTATION_RETURNED = 6;
inline constexpr int64_t STOP_OWNED_UPDATE_READ = 7;
inline constexpr int64_t STOP_VALIDATE = 8;

// where a stop is met in the reference's work on one partition (RuleStop.stage)
inline constexpr int64_t STAGE_FUSE = 0;
inline constexpr int64_t STAGE_PROGRAM = 1;
inline constexpr int64_t STAGE_INSERT = 2;

// when plan_graph inserts each partition's delegate (PlanOptions.delegate_insertion)
inline constexpr int64_t DELEGATES_WHILE_FUSING = 0;
inline constexpr int64_t DELEGATES_AFTER_FUSING = 1;

}  // namespace fastlower
