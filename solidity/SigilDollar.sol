// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @title Sigil Dollar (USDS): the dev chain's stand-in for USDC.
/// @notice A 6-decimal ERC-20 with EIP-3009 transfers by signed authorization, so x402's `exact` EVM
/// scheme settles against it exactly as it settles against USDC on Base (FiatToken v2.2): same
/// function signatures, same EIP-712 types, revert reasons worded so x402's facilitator maps them
/// to the same error codes. It is for local chains only: the owner mints at will.
/// @dev Written for this project in one file, with no imports, so solc-js compiles it offline.
contract SigilDollar {
    // ---- ERC-20 metadata. `name` is also the EIP-712 domain name, as in USDC: x402's facilitator
    // reads `name()` and `version()` and compares them with the `extra` of the payment requirements.
    string public constant name = "Sigil Dollar";
    string public constant symbol = "USDS";
    uint8 public constant decimals = 6;
    /// EIP-712 domain version (USDC's is "2"; ours starts at "1").
    string public constant version = "1";

    /// The deployer, the only account that may mint. Fixed: a dev token needs no hand-over.
    address public immutable owner;

    uint256 public totalSupply;
    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;
    /// authorizer => nonce => used or canceled. Nonces are random 32-byte values, not a counter, so
    /// a wallet can have many authorizations in flight and settle them in any order.
    mapping(address => mapping(bytes32 => bool)) private _authorizationUsed;

    bytes32 public constant TRANSFER_WITH_AUTHORIZATION_TYPEHASH =
        keccak256(
            "TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"
        );
    bytes32 public constant RECEIVE_WITH_AUTHORIZATION_TYPEHASH =
        keccak256(
            "ReceiveWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"
        );
    bytes32 public constant CANCEL_AUTHORIZATION_TYPEHASH =
        keccak256("CancelAuthorization(address authorizer,bytes32 nonce)");
    bytes32 private constant EIP712_DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)");

    /// Half the secp256k1 order: signatures with a larger `s` are the malleable twin of a valid one
    /// and are refused (EIP-2), so one authorization has exactly one accepted signature.
    uint256 private constant SECP256K1_HALF_ORDER =
        0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0;
    /// ERC-1271: a contract wallet that accepts a signature returns the selector of the function asked,
    /// `isValidSignature(bytes32,bytes)`; the same four bytes serve to call it.
    bytes4 private constant ERC1271_MAGIC_VALUE = 0x1626ba7e;

    // The domain separator depends on the chain id; it is cached for the deployment chain and
    // recomputed if the chain id ever differs (a fork), so a signature never replays across chains.
    bytes32 private immutable _cachedDomainSeparator;
    uint256 private immutable _cachedChainId;

    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);
    event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce);
    event AuthorizationCanceled(address indexed authorizer, bytes32 indexed nonce);

    constructor() {
        owner = msg.sender;
        _cachedChainId = block.chainid;
        _cachedDomainSeparator = _buildDomainSeparator();
    }

    // ---------------------------------------------------------------- ERC-20

    function transfer(address to, uint256 value) external returns (bool) {
        _transfer(msg.sender, to, value);
        return true;
    }

    function approve(address spender, uint256 value) external returns (bool) {
        allowance[msg.sender][spender] = value;
        emit Approval(msg.sender, spender, value);
        return true;
    }

    function transferFrom(address from, address to, uint256 value) external returns (bool) {
        uint256 allowed = allowance[from][msg.sender];
        // The maximum allowance means "unlimited" and is never decremented (saves a write per call).
        if (allowed != type(uint256).max) {
            require(allowed >= value, "ERC20: transfer amount exceeds allowance");
            allowance[from][msg.sender] = allowed - value;
        }
        _transfer(from, to, value);
        return true;
    }

    /// Dev-chain funding: only the deployer mints.
    function mint(address to, uint256 value) external {
        require(msg.sender == owner, "SigilDollar: caller is not the owner");
        require(to != address(0), "SigilDollar: mint to the zero address");
        totalSupply += value;
        balanceOf[to] += value;
        emit Transfer(address(0), to, value);
    }

    // ---------------------------------------------------------------- EIP-712 / EIP-5267

    function DOMAIN_SEPARATOR() public view returns (bytes32) {
        return block.chainid == _cachedChainId ? _cachedDomainSeparator : _buildDomainSeparator();
    }

    /// EIP-5267: lets wallets and viem's `getEip712Domain` read the domain instead of being told it.
    function eip712Domain()
        external
        view
        returns (
            bytes1 fields,
            string memory domainName,
            string memory domainVersion,
            uint256 chainId,
            address verifyingContract,
            bytes32 salt,
            uint256[] memory extensions
        )
    {
        // 0x0f: name, version, chainId and verifyingContract are present; no salt, no extensions.
        return (hex"0f", name, version, block.chainid, address(this), bytes32(0), new uint256[](0));
    }

    // ---------------------------------------------------------------- EIP-3009
    // Each entry point exists twice, as in FiatToken v2.2: with (v, r, s) for EOAs, and with
    // `bytes signature`, which also accepts ERC-1271 contract wallets. x402's facilitator calls the
    // first for a 65-byte ECDSA signature and the second for anything else.

    function authorizationState(address authorizer, bytes32 nonce) external view returns (bool) {
        return _authorizationUsed[authorizer][nonce];
    }

    function transferWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) external {
        _transferWithAuthorization(from, to, value, validAfter, validBefore, nonce, abi.encodePacked(r, s, v));
    }

    function transferWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) external {
        _transferWithAuthorization(from, to, value, validAfter, validBefore, nonce, signature);
    }

    /// Like transferWithAuthorization, but only the payee may submit it: a contract that pulls a
    /// payment cannot have the authorization front-run into a plain transfer that skips its logic.
    function receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) external {
        _receiveWithAuthorization(from, to, value, validAfter, validBefore, nonce, abi.encodePacked(r, s, v));
    }

    function receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) external {
        _receiveWithAuthorization(from, to, value, validAfter, validBefore, nonce, signature);
    }

    /// Burns an unused nonce, so an authorization handed out but not yet settled can be withdrawn.
    function cancelAuthorization(address authorizer, bytes32 nonce, uint8 v, bytes32 r, bytes32 s) external {
        _cancelAuthorization(authorizer, nonce, abi.encodePacked(r, s, v));
    }

    function cancelAuthorization(address authorizer, bytes32 nonce, bytes memory signature) external {
        _cancelAuthorization(authorizer, nonce, signature);
    }

    // ---------------------------------------------------------------- internals

    function _transferWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) private {
        _requireValidAuthorization(from, nonce, validAfter, validBefore);
        bytes32 structHash = keccak256(
            abi.encode(TRANSFER_WITH_AUTHORIZATION_TYPEHASH, from, to, value, validAfter, validBefore, nonce)
        );
        _requireSignedBy(from, structHash, signature);
        _useAuthorization(from, nonce);
        _transfer(from, to, value);
    }

    function _receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) private {
        require(to == msg.sender, "SigilDollar: caller must be the payee");
        _requireValidAuthorization(from, nonce, validAfter, validBefore);
        bytes32 structHash = keccak256(
            abi.encode(RECEIVE_WITH_AUTHORIZATION_TYPEHASH, from, to, value, validAfter, validBefore, nonce)
        );
        _requireSignedBy(from, structHash, signature);
        _useAuthorization(from, nonce);
        _transfer(from, to, value);
    }

    function _cancelAuthorization(address authorizer, bytes32 nonce, bytes memory signature) private {
        _requireUnusedAuthorization(authorizer, nonce);
        _requireSignedBy(authorizer, keccak256(abi.encode(CANCEL_AUTHORIZATION_TYPEHASH, authorizer, nonce)), signature);
        _authorizationUsed[authorizer][nonce] = true;
        emit AuthorizationCanceled(authorizer, nonce);
    }

    // Revert reasons are strings, not custom errors, worded like FiatToken's: x402's facilitator does
    // not have this contract's ABI, so it can only classify a failed settlement by matching the
    // message ("authorization is expired", "… is used or canceled", "invalid signature", …).

    function _requireValidAuthorization(address authorizer, bytes32 nonce, uint256 validAfter, uint256 validBefore)
        private
        view
    {
        require(block.timestamp > validAfter, "SigilDollar: authorization is not yet valid");
        require(block.timestamp < validBefore, "SigilDollar: authorization is expired");
        _requireUnusedAuthorization(authorizer, nonce);
    }

    function _requireUnusedAuthorization(address authorizer, bytes32 nonce) private view {
        require(!_authorizationUsed[authorizer][nonce], "SigilDollar: authorization is used or canceled");
    }

    function _useAuthorization(address authorizer, bytes32 nonce) private {
        _authorizationUsed[authorizer][nonce] = true;
        emit AuthorizationUsed(authorizer, nonce);
    }

    /// The EIP-712 digest of `structHash` must be signed by `signer`: through ERC-1271 when the
    /// signer is a contract (a smart wallet), through ECDSA otherwise.
    function _requireSignedBy(address signer, bytes32 structHash, bytes memory signature) private view {
        bytes32 digest = keccak256(abi.encodePacked("\x19\x01", DOMAIN_SEPARATOR(), structHash));
        bool valid = signer.code.length > 0
            ? _isValidErc1271Signature(signer, digest, signature)
            : signer != address(0) && _recover(digest, signature) == signer;
        require(valid, "SigilDollar: invalid signature");
    }

    function _isValidErc1271Signature(address wallet, bytes32 digest, bytes memory signature)
        private
        view
        returns (bool)
    {
        (bool success, bytes memory result) = wallet.staticcall(
            abi.encodeWithSelector(ERC1271_MAGIC_VALUE, digest, signature)
        );
        return success && result.length >= 32 && abi.decode(result, (bytes32)) == bytes32(ERC1271_MAGIC_VALUE);
    }

    /// ECDSA recovery from a 65-byte r‖s‖v signature; address(0) for anything malformed, which
    /// never equals a (non-zero) signer.
    function _recover(bytes32 digest, bytes memory signature) private pure returns (address) {
        if (signature.length != 65) return address(0);
        bytes32 r;
        bytes32 s;
        uint8 v;
        assembly {
            r := mload(add(signature, 0x20))
            s := mload(add(signature, 0x40))
            v := byte(0, mload(add(signature, 0x60)))
        }
        // Accept the y-parity form (0/1) too: some signers and libraries hand that over instead of 27/28.
        if (v < 27) v += 27;
        if (v != 27 && v != 28) return address(0);
        if (uint256(s) > SECP256K1_HALF_ORDER) return address(0);
        return ecrecover(digest, v, r, s);
    }

    function _transfer(address from, address to, uint256 value) private {
        require(to != address(0), "ERC20: transfer to the zero address");
        uint256 balance = balanceOf[from];
        require(balance >= value, "ERC20: transfer amount exceeds balance");
        unchecked {
            // Cannot underflow (checked above) nor overflow (the sum of balances is totalSupply).
            balanceOf[from] = balance - value;
            balanceOf[to] += value;
        }
        emit Transfer(from, to, value);
    }

    function _buildDomainSeparator() private view returns (bytes32) {
        return keccak256(
            abi.encode(EIP712_DOMAIN_TYPEHASH, keccak256(bytes(name)), keccak256(bytes(version)), block.chainid, address(this))
        );
    }
}
