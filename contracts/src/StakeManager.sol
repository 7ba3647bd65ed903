// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {AccessControl} from "@openzeppelin/contracts/access/AccessControl.sol";
import {Pausable} from "@openzeppelin/contracts/utils/Pausable.sol";
import {ReentrancyGuard} from "@openzeppelin/contracts/utils/ReentrancyGuard.sol";
import {Nonces} from "@openzeppelin/contracts/utils/Nonces.sol";
import {Address} from "@openzeppelin/contracts/utils/Address.sol";
import {SafeCast} from "@openzeppelin/contracts/utils/math/SafeCast.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";
import {IGovernanceLatency, IStakeManager} from "./interfaces/IStakeManager.sol";
import {ComputeAttestation, IContributionLedger} from "./interfaces/IContributionLedger.sol";
import {ITrainingConfig} from "./interfaces/ITrainingConfig.sol";

/// @title StakeManager
/// @notice Node registry (stable ids, keys proven by signature) and native-currency stake with an
/// unbonding delay, optimistic slashing and permissionless equivocation slashing.
/// @dev Native currency leaves only in `withdraw` (to the operator), `executeSlash` and
/// `reportEquivocation` (to the treasury and the reporter), all nonReentrant and all after every
/// state write (checks-effects-interactions). Balances are uint96 (7.9e28 wei).
contract StakeManager is IStakeManager, AccessControl, Pausable, ReentrancyGuard, Nonces, EIP712 {
    /// @inheritdoc IStakeManager
    bytes32 public constant SLASHER_ROLE = keccak256("SLASHER_ROLE");
    /// @inheritdoc IStakeManager
    bytes32 public constant GUARDIAN_ROLE = keccak256("GUARDIAN_ROLE");
    /// @notice EIP-712 type hash of `NodeKeyProof`.
    bytes32 public constant NODE_KEY_PROOF_TYPEHASH =
        keccak256("NodeKeyProof(address operator,address payout,uint256 nonce,uint256 deadline)");

    /// @notice Basis-point denominator.
    uint256 public constant BPS = 10_000;
    /// @notice Upper bound on the reporter's share of a slash: half.
    uint256 public constant MAX_REPORTER_SHARE_BPS = 5000;
    /// @notice Bounds of the slash dispute window.
    uint64 public constant MIN_SLASH_DISPUTE_WINDOW = 1;
    uint64 public constant MAX_SLASH_DISPUTE_WINDOW = 30 days;
    /// @notice Upper bound on the unbonding delay.
    uint64 public constant MAX_UNBONDING_DELAY = 365 days;

    uint64 private constant _RETIRED = uint64(1) << 63;

    /// @dev slot 0: operator + unbondingReadyAt + pendingSlashes; slot 1: payout + staked;
    /// slot 2: unbonding.
    struct Node {
        address operator;
        uint64 unbondingReadyAt;
        uint32 pendingSlashes;
        address payout;
        uint96 staked;
        uint96 unbonding;
    }

    /// @dev Governed parameters and the id counter, one slot.
    struct Params {
        uint64 unbondingDelay;
        uint64 slashDisputeWindow;
        uint16 reporterShareBps;
        uint16 equivocationSlashBps;
        uint64 nodeCount;
    }

    /// @notice Constructor arguments.
    /// @param admin DEFAULT_ADMIN_ROLE and SLASHER_ROLE: the Timelock (governance executor).
    /// @param guardian GUARDIAN_ROLE (zero: none): may pause withdrawals and veto slashes.
    /// @param treasury Receiver of slashed stake: never `admin`, `governance` or a slasher.
    struct Init {
        address admin;
        address guardian;
        ITrainingConfig config;
        IContributionLedger ledger;
        IGovernanceLatency governance;
        address treasury;
        uint64 unbondingDelay;
        uint64 slashDisputeWindow;
        uint16 reporterShareBps;
        uint16 equivocationSlashBps;
    }

    /// @notice Where the TrainingConfig minimum stake is read.
    ITrainingConfig public immutable config;
    /// @notice Where attestation signatures are verified (equivocation evidence).
    IContributionLedger public immutable ledger;
    /// @notice Where governance latency is read (the ModelGovernor).
    IGovernanceLatency public immutable governance;
    /// @notice Where slashed stake goes (never the admin, never a slasher).
    address public immutable treasury;

    mapping(address key => uint64 idAndFlag) private _keyIds;
    mapping(uint64 nodeId => Node) private _nodes;
    mapping(uint256 proposalId => SlashProposal) private _proposals;
    /// @notice Whether keccak256(abi.encode(nodeId, runId, round)) was slashed for equivocation.
    mapping(bytes32 nodeRunRound => bool) public equivocationSlashed;
    Params private _params;
    /// @notice Slash proposals so far (ids start at 1).
    uint256 public proposalCount;

    constructor(Init memory init) EIP712("coloco", "1") {
        if (
            init.treasury == address(0) || init.admin == address(0)
                || address(init.config) == address(0) || address(init.ledger) == address(0)
                || address(init.governance) == address(0)
        ) revert ZeroAddress();
        if (
            init.treasury == init.admin || init.treasury == address(init.governance)
                || init.treasury == init.guardian
        ) revert InvalidTreasury(init.treasury);
        config = init.config;
        ledger = init.ledger;
        governance = init.governance;
        treasury = init.treasury;
        _grantRole(DEFAULT_ADMIN_ROLE, init.admin);
        _grantRole(SLASHER_ROLE, init.admin);
        if (init.guardian != address(0)) _grantRole(GUARDIAN_ROLE, init.guardian);
        _setReporterShareBps(init.reporterShareBps);
        _setEquivocationSlashBps(init.equivocationSlashBps);
        if (
            init.slashDisputeWindow < MIN_SLASH_DISPUTE_WINDOW
                || init.slashDisputeWindow > MAX_SLASH_DISPUTE_WINDOW
        ) revert InvalidParameter("slashDisputeWindow", init.slashDisputeWindow);
        _params.slashDisputeWindow = init.slashDisputeWindow;
        _setUnbondingDelay(init.unbondingDelay);
    }

    modifier onlyGuardianOrAdmin() {
        if (!hasRole(GUARDIAN_ROLE, msg.sender) && !hasRole(DEFAULT_ADMIN_ROLE, msg.sender)) {
            revert NotGuardian(msg.sender);
        }
        _;
    }

    // --- registry -------------------------------------------------------------------------------

    /// @inheritdoc IStakeManager
    function register(address node, address payout, uint256 deadline, bytes calldata signature)
        external
    {
        if (node == address(0) || payout == address(0)) revert ZeroAddress();
        if (_keyIds[node] != 0) revert NodeAlreadyRegistered(node);
        _checkKeyProof(node, payout, deadline, signature);
        uint64 id = ++_params.nodeCount;
        _keyIds[node] = id;
        _nodes[id].operator = msg.sender;
        _nodes[id].payout = payout;
        emit NodeRegistered(node, msg.sender, payout, id);
    }

    /// @inheritdoc IStakeManager
    function rotateNodeKey(
        address oldNode,
        address newNode,
        uint256 deadline,
        bytes calldata signature
    ) external {
        (uint64 id, Node storage n) = _operated(oldNode);
        if (n.pendingSlashes != 0) revert NodeFrozen(oldNode);
        if (newNode == address(0)) revert ZeroAddress();
        if (_keyIds[newNode] != 0) revert NodeAlreadyRegistered(newNode);
        _checkKeyProof(newNode, n.payout, deadline, signature);
        _keyIds[newNode] = id;
        _keyIds[oldNode] = id | _RETIRED;
        emit NodeKeyRotated(oldNode, newNode, id);
    }

    /// @inheritdoc IStakeManager
    function setPayout(address node, address payout) external {
        (, Node storage n) = _operated(node);
        if (payout == address(0)) revert ZeroAddress();
        n.payout = payout;
        emit PayoutChanged(node, payout);
    }

    // --- stake ----------------------------------------------------------------------------------

    /// @inheritdoc IStakeManager
    function stake(address node) external payable {
        if (msg.value == 0) revert ZeroAmount();
        uint64 id = _currentId(node);
        Node storage n = _nodes[id];
        uint256 total = n.staked + msg.value;
        uint256 minimum = config.minStake();
        if (total < minimum) revert StakeBelowMinimum(node, total, minimum);
        n.staked = SafeCast.toUint96(total);
        emit Staked(node, msg.sender, msg.value, total);
    }

    /// @inheritdoc IStakeManager
    function requestUnstake(address node, uint256 amount) external {
        (, Node storage n) = _operated(node);
        if (n.pendingSlashes != 0) revert NodeFrozen(node);
        if (amount == 0) revert ZeroAmount();
        uint256 staked = n.staked;
        if (amount > staked) revert InsufficientStake(node, amount, staked);
        uint256 unbonding = n.unbonding + amount;
        // forge-lint: disable-next-line(block-timestamp)
        uint64 readyAt = SafeCast.toUint64(block.timestamp + effectiveUnbondingDelay());
        // casting to 'uint96' is safe because amount <= staked, itself a uint96
        // forge-lint: disable-next-line(unsafe-typecast)
        n.staked = uint96(staked - amount);
        n.unbonding = SafeCast.toUint96(unbonding);
        n.unbondingReadyAt = readyAt;
        emit UnstakeRequested(node, amount, unbonding, readyAt);
    }

    /// @inheritdoc IStakeManager
    function withdraw(address node) external nonReentrant whenNotPaused {
        (, Node storage n) = _operated(node);
        if (n.pendingSlashes != 0) revert NodeFrozen(node);
        uint256 amount = n.unbonding;
        if (amount == 0) revert NothingToWithdraw(node);
        // Unbonding lasts days; a validator's few seconds of timestamp drift do not matter.
        // forge-lint: disable-next-line(block-timestamp)
        if (block.timestamp < n.unbondingReadyAt) revert StillUnbonding(node, n.unbondingReadyAt);
        n.unbonding = 0;
        n.unbondingReadyAt = 0;
        emit Withdrawn(node, msg.sender, amount);
        Address.sendValue(payable(msg.sender), amount);
    }

    // --- slashing -------------------------------------------------------------------------------

    /// @inheritdoc IStakeManager
    function proposeSlash(address node, uint256 amount, bytes32 evidenceHash, address reporter)
        external
        onlyRole(SLASHER_ROLE)
        returns (uint256 proposalId)
    {
        if (amount == 0) revert ZeroAmount();
        uint64 id = _keyIds[node] & ~_RETIRED;
        if (id == 0) revert NodeNotRegistered(node);
        _nodes[id].pendingSlashes += 1;
        // forge-lint: disable-next-line(block-timestamp)
        uint64 executableAt = uint64(block.timestamp) + _params.slashDisputeWindow;
        proposalId = ++proposalCount;
        _proposals[proposalId] = SlashProposal({
            nodeId: id,
            executableAt: executableAt,
            status: 1,
            reporter: reporter,
            amount: SafeCast.toUint96(amount),
            evidenceHash: evidenceHash
        });
        emit SlashProposed(proposalId, id, amount, evidenceHash, reporter, executableAt);
    }

    /// @inheritdoc IStakeManager
    function executeSlash(uint256 proposalId) external nonReentrant returns (uint256 amount) {
        SlashProposal storage p = _proposals[proposalId];
        if (p.status != 1) revert NotPendingSlash(proposalId);
        // forge-lint: disable-next-line(block-timestamp)
        if (block.timestamp < p.executableAt) revert SlashNotReady(proposalId, p.executableAt);
        p.status = 2;
        uint64 id = p.nodeId;
        _nodes[id].pendingSlashes -= 1;
        amount = _take(id, p.amount);
        _pay(id, amount, p.evidenceHash, p.reporter);
    }

    /// @inheritdoc IStakeManager
    function vetoSlash(uint256 proposalId) external onlyGuardianOrAdmin {
        SlashProposal storage p = _proposals[proposalId];
        if (p.status != 1) revert NotPendingSlash(proposalId);
        p.status = 3;
        _nodes[p.nodeId].pendingSlashes -= 1;
        emit SlashVetoed(proposalId, msg.sender);
    }

    /// @inheritdoc IStakeManager
    function reportEquivocation(
        ComputeAttestation calldata a,
        bytes calldata sigA,
        ComputeAttestation calldata b,
        bytes calldata sigB
    ) external nonReentrant returns (uint256 amount) {
        // Cheap checks first, signatures last.
        if (a.node != b.node || a.runId != b.runId || a.round != b.round) {
            revert NotEquivocation();
        }
        uint64 id = _keyIds[a.node] & ~_RETIRED;
        if (id == 0) revert NodeNotRegistered(a.node);
        bytes32 key = keccak256(abi.encode(id, a.runId, a.round));
        if (equivocationSlashed[key]) revert EquivocationAlreadySlashed(id, a.runId, a.round);
        if (keccak256(abi.encode(a)) == keccak256(abi.encode(b))) revert NotEquivocation();
        ledger.verifyAttestation(a, sigA);
        ledger.verifyAttestation(b, sigB);
        equivocationSlashed[key] = true;
        Node storage n = _nodes[id];
        amount = (uint256(n.staked) + n.unbonding) * _params.equivocationSlashBps / BPS;
        amount = _take(id, amount);
        _pay(id, amount, key, msg.sender);
    }

    /// @notice Slash proposal `proposalId` (status 0: none).
    function slashProposal(uint256 proposalId) external view returns (SlashProposal memory) {
        return _proposals[proposalId];
    }

    // --- governance -----------------------------------------------------------------------------

    /// @notice Sets the unbonding delay (>= governance latency + slash dispute window).
    function setUnbondingDelay(uint64 delay) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setUnbondingDelay(delay);
    }

    /// @notice Sets the slash dispute window (unbonding must still cover latency + window).
    function setSlashDisputeWindow(uint64 window) external onlyRole(DEFAULT_ADMIN_ROLE) {
        if (window < MIN_SLASH_DISPUTE_WINDOW || window > MAX_SLASH_DISPUTE_WINDOW) {
            revert InvalidParameter("slashDisputeWindow", window);
        }
        uint256 needed = governance.governanceLatency() + window;
        if (_params.unbondingDelay < needed) {
            revert UnbondingTooShort(_params.unbondingDelay, needed);
        }
        _params.slashDisputeWindow = window;
        emit ParameterSet("slashDisputeWindow", window);
    }

    /// @notice Sets the reporter's share of slashes, in basis points (<= 50 %).
    function setReporterShareBps(uint16 bps) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setReporterShareBps(bps);
    }

    /// @notice Sets the fraction of stake an equivocation costs, in basis points (1..10000).
    function setEquivocationSlashBps(uint16 bps) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setEquivocationSlashBps(bps);
    }

    /// @notice Stops withdrawals. The guardian or governance.
    function pause() external onlyGuardianOrAdmin {
        _pause();
    }

    /// @notice Resumes withdrawals. Only governance.
    function unpause() external onlyRole(DEFAULT_ADMIN_ROLE) {
        _unpause();
    }

    // --- views ----------------------------------------------------------------------------------

    /// @inheritdoc IStakeManager
    function hashNodeKeyProof(NodeKeyProof calldata proof) public view returns (bytes32) {
        return _hashTypedDataV4(
            keccak256(
                abi.encode(
                    NODE_KEY_PROOF_TYPEHASH,
                    proof.operator,
                    proof.payout,
                    proof.nonce,
                    proof.deadline
                )
            )
        );
    }

    /// @inheritdoc IStakeManager
    function nodes(address node)
        external
        view
        returns (
            address operator,
            address payout,
            uint256 staked,
            uint256 unbonding,
            uint64 unbondingReadyAt
        )
    {
        uint64 id = _keyIds[node];
        if (id == 0 || id & _RETIRED != 0) return (address(0), address(0), 0, 0, 0);
        Node storage n = _nodes[id];
        return (n.operator, n.payout, n.staked, n.unbonding, n.unbondingReadyAt);
    }

    /// @inheritdoc IStakeManager
    function nodeIdOf(address node) external view returns (uint64) {
        return _keyIds[node] & ~_RETIRED;
    }

    /// @notice Whether `node` was rotated away from (it can never be registered again).
    function retired(address node) external view returns (bool) {
        return _keyIds[node] & _RETIRED != 0;
    }

    /// @inheritdoc IStakeManager
    function isActive(address node) external view returns (bool) {
        uint64 id = _keyIds[node];
        if (id == 0 || id & _RETIRED != 0) return false;
        return _nodes[id].staked >= config.minStake();
    }

    /// @inheritdoc IStakeManager
    function isFrozen(address node) external view returns (bool) {
        return _nodes[_keyIds[node] & ~_RETIRED].pendingSlashes != 0;
    }

    /// @inheritdoc IStakeManager
    function payoutOf(address node) external view returns (address) {
        uint64 id = _keyIds[node];
        if (id & _RETIRED != 0) return address(0);
        return _nodes[id].payout;
    }

    /// @inheritdoc IStakeManager
    function effectiveUnbondingDelay() public view returns (uint256) {
        uint256 floor = governance.governanceLatency() + _params.slashDisputeWindow;
        uint256 delay = _params.unbondingDelay;
        return delay > floor ? delay : floor;
    }

    /// @notice The governed parameters: unbonding delay, slash dispute window, reporter share and
    /// equivocation fraction (basis points), and the number of registered nodes.
    function params() external view returns (Params memory) {
        return _params;
    }

    // --- internals ------------------------------------------------------------------------------

    /// @dev A reward key (not retired) and its node, checking msg.sender is its operator.
    function _operated(address node) private view returns (uint64 id, Node storage n) {
        id = _currentId(node);
        n = _nodes[id];
        if (n.operator != msg.sender) revert NotOperator(node, msg.sender);
    }

    function _currentId(address node) private view returns (uint64 id) {
        id = _keyIds[node];
        if (id == 0 || id & _RETIRED != 0) revert NodeNotRegistered(node);
    }

    function _checkKeyProof(
        address node,
        address payout,
        uint256 deadline,
        bytes calldata signature
    ) private {
        // forge-lint: disable-next-line(block-timestamp)
        if (block.timestamp > deadline) revert ProofExpired(deadline);
        bytes32 digest = _hashTypedDataV4(
            keccak256(
                abi.encode(NODE_KEY_PROOF_TYPEHASH, msg.sender, payout, nonces(node), deadline)
            )
        );
        (address signer, ECDSA.RecoverError err,) = ECDSA.tryRecover(digest, signature);
        if (err != ECDSA.RecoverError.NoError) revert InvalidKeyProof(signature);
        if (signer != node) revert WrongKeySigner(signer, node);
        _useNonce(node);
    }

    /// @dev Takes up to `amount` from node `id`, staked first: min(amount, available).
    function _take(uint64 id, uint256 amount) private returns (uint256 taken) {
        Node storage n = _nodes[id];
        uint256 staked = n.staked;
        uint256 unbonding = n.unbonding;
        uint256 available = staked + unbonding;
        taken = amount < available ? amount : available;
        uint256 fromStaked = taken < staked ? taken : staked;
        // fromStaked <= staked and taken - fromStaked <= unbonding: no underflow; the results
        // are at most their uint96 starting values, so the casts are safe.
        unchecked {
            // forge-lint: disable-next-line(unsafe-typecast)
            n.staked = uint96(staked - fromStaked);
            // forge-lint: disable-next-line(unsafe-typecast)
            n.unbonding = uint96(unbonding - (taken - fromStaked));
        }
    }

    /// @dev Sends `amount` to the treasury, less the reporter's share if there is a reporter.
    function _pay(uint64 id, uint256 amount, bytes32 evidenceHash, address reporter) private {
        uint256 share = reporter == address(0) ? 0 : amount * _params.reporterShareBps / BPS;
        emit Slashed(id, amount, evidenceHash, reporter, share, treasury);
        if (share != 0) Address.sendValue(payable(reporter), share);
        if (amount > share) Address.sendValue(payable(treasury), amount - share);
    }

    function _setUnbondingDelay(uint64 delay) private {
        uint256 needed = governance.governanceLatency() + _params.slashDisputeWindow;
        if (delay > MAX_UNBONDING_DELAY) revert InvalidParameter("unbondingDelay", delay);
        if (delay < needed) revert UnbondingTooShort(delay, needed);
        _params.unbondingDelay = delay;
        emit ParameterSet("unbondingDelay", delay);
    }

    function _setReporterShareBps(uint16 bps) private {
        if (bps > MAX_REPORTER_SHARE_BPS) revert InvalidParameter("reporterShareBps", bps);
        _params.reporterShareBps = bps;
        emit ParameterSet("reporterShareBps", bps);
    }

    function _setEquivocationSlashBps(uint16 bps) private {
        if (bps == 0 || bps > BPS) revert InvalidParameter("equivocationSlashBps", bps);
        _params.equivocationSlashBps = bps;
        emit ParameterSet("equivocationSlashBps", bps);
    }

    /// @dev The treasury never holds the slasher, guardian or admin role: slashing never pays
    /// whoever decides or vetoes a slash.
    function _grantRole(bytes32 role, address account) internal override returns (bool) {
        if (
            account == treasury
                && (role == SLASHER_ROLE || role == DEFAULT_ADMIN_ROLE || role == GUARDIAN_ROLE)
        ) {
            revert InvalidTreasury(account);
        }
        return super._grantRole(role, account);
    }
}
