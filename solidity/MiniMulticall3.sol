// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @title MiniMulticall3: the part of Multicall3 that x402's facilitator calls, for the dev chain.
/// @notice When a payment fails its simulation, x402's `exact` facilitator reads the token's
/// `balanceOf`, `name`, `version` and `authorizationState` in one `tryAggregate` call to the
/// canonical Multicall3 address (0xcA11bde05977b3631167028862bE2a173976CA11) and names the reason
/// (nonce already used, insufficient balance...). Public chains have Multicall3 there; a fresh anvil
/// has nothing, and every failure then reads as `transaction_simulation_failed`. The dev chain puts
/// this contract's runtime bytecode at that address with `anvil_setCode`.
/// @dev Same selector, argument and return encoding and revert message as Multicall3's
/// `tryAggregate`. No constructor and no immutables: the runtime bytecode alone is the contract.
/// Written for this project, with no imports, so solc-js compiles it offline.
contract MiniMulticall3 {
    struct Call {
        address target;
        bytes callData;
    }

    struct Result {
        bool success;
        bytes returnData;
    }

    /// @notice Calls each target in order with its call data, and returns every call's outcome:
    /// whether it succeeded, and what it returned (or its revert data). With `requireSuccess`, the
    /// first failed call reverts the whole batch.
    /// @dev Payable as Multicall3's is (so the ABI matches); no value is forwarded.
    function tryAggregate(
        bool requireSuccess,
        Call[] calldata calls
    ) external payable returns (Result[] memory returnData) {
        returnData = new Result[](calls.length);
        for (uint256 i = 0; i < calls.length; ++i) {
            (bool success, bytes memory data) = calls[i].target.call(calls[i].callData);
            if (requireSuccess && !success) revert("Multicall3: call failed");
            returnData[i] = Result(success, data);
        }
    }
}
