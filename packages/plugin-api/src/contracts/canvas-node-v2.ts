import type { z } from 'zod';

/**
 * `canvas-node` v2: one kind of node in a canvas workflow, a typed DAG the runtime runs in
 * topological order. v1 plus typed ports, a params schema, an effect the executor enforces, and the
 * host's services (the wallet's LLM keys, the gateway's tools, the run's workspace and artifacts).
 *
 * A conforming node:
 * - names its kind in lowercase letters, digits and dashes (`write-files`, `browser-verify`): the
 *   `kind` of a workflow document's node;
 * - parses its params with `params` (a zod schema), so a document's bad params are refused at
 *   validation with the path of each problem, and declares its ports for given params with `ports`,
 *   the same every call for the same params;
 * - resolves `run` to an object with a value for each required output port, of the port's type (the
 *   executor checks, and fails the node otherwise), and reports progress through `log`;
 * - stops when `signal` aborts (cancellation, a timeout), rejecting with the signal's reason, and
 *   changes nothing after it;
 * - when `effect` is `writes`: refuses to run, rejecting with a SigilError `forbidden` whose
 *   `details.reason` is `approval_required` and changing nothing, unless `approvals` holds at least
 *   one decision and every one approved (the executor checks before it calls `run`, and the node again,
 *   so a node is safe however it is called); and changes things at most once per `idempotencyKey`
 *   (a run that crashed while the node ran calls it again with the same key);
 * - when `effect` is not `writes`: changes nothing in `workspace` or outside the run;
 * - never puts a secret it was given (`secret`, a key in params) in its outputs, logs or errors.
 */
export interface CanvasNodeV2<Params = Record<string, unknown>> {
  /** The version of this contract the instance implements: its manifest's `specVersion`. */
  readonly specVersion: 'v2';
  /**
   * Node kind as it appears in workflow documents, e.g. `write-files`, `browser-verify`; the manifest
   * provides it to `extensionPoints.canvasNodeKinds`, by which a canvas finds this plugin.
   */
  readonly nodeKind: string;
  /** One sentence for the node catalog (`GET /canvas/node-kinds`) and generated docs. */
  readonly description: string;
  /**
   * What the node does beyond computing its outputs, which the executor enforces:
   * - `none`: nothing (a pure function of params and inputs);
   * - `reads`: calls outside the run without changing anything there (a model, a tool, a page);
   * - `writes`: changes files or services; runs only with an approved approval upstream on every path;
   * - `approval`: a human gate; the executor pauses the run before it (`waiting_approval`) and calls
   *   `run` once the workflow's owner decided, with the decision as `approvals[0]`.
   */
  readonly effect: CanvasNodeEffect;
  /** True when the node is part of team mode: refused at validation unless the runtime enables it. */
  readonly teamMode?: boolean;
  /** The node's params in a workflow document (`{}` when absent); an object schema. */
  readonly params: z.ZodType<Params>;
  /** The node's input and output ports for params that `params` accepted. */
  ports(params: Params): CanvasPortsV2;
  /**
   * Params and inputs the node runs with, shown in the node catalog and run by the contract kit (with
   * an approved upstream decision for a `writes` node, its own for an `approval` one).
   */
  readonly example: CanvasNodeExampleV2;
  /** Runs the node once: its params, the values on its input ports, the host's services. */
  run(context: CanvasNodeContextV2<Params>): Promise<Record<string, unknown>>;
}

export interface CanvasNodeExampleV2 {
  params: Record<string, unknown>;
  inputs: Record<string, unknown>;
  /** Files the workspace holds before the example runs (a page for a browser node to open). */
  workspaceFiles?: CanvasFileV2[];
}

export type CanvasNodeEffect = 'none' | 'reads' | 'writes' | 'approval';

/**
 * The type of a value on a port. An edge connects an output to an input of the same type, or to an
 * input of type `json` (which takes any JSON value). `files` is a list of `{ path, content }` with a
 * relative path and UTF-8 content.
 */
export type CanvasPortType = 'string' | 'number' | 'boolean' | 'object' | 'array' | 'files' | 'json';

export interface CanvasPortV2 {
  type: CanvasPortType;
  /** Inputs: whether an edge must feed it (default true). Outputs: whether `run` always sets it (default true). */
  required?: boolean;
  description?: string;
}

export interface CanvasPortsV2 {
  inputs: Record<string, CanvasPortV2>;
  outputs: Record<string, CanvasPortV2>;
}

/** A file on a `files` port: a path relative to the workspace, and its UTF-8 content. */
export interface CanvasFileV2 {
  path: string;
  content: string;
}

/** The owner's decision on an approval node upstream (or, for an approval node, its own). */
export interface CanvasApprovalV2 {
  /** The approval node's id. */
  nodeId: string;
  approved: boolean;
  /** The wallet that decided (the workflow's owner). */
  decidedBy: string;
  /** ISO 8601. */
  decidedAt: string;
  comment?: string;
  /** SHA-256 (hex) of the canonical JSON of the value approved, as the approval request showed it. */
  valueHash: string;
  /** The owner's EIP-191 signature over the approval message, when the decision came signed. */
  signature?: string;
}

export interface CanvasNodeContextV2<Params = Record<string, unknown>> {
  /** The run's id, and this node's id in the document. */
  readonly runId: string;
  readonly nodeId: string;
  /** 1 for the first attempt; retries count up. */
  readonly attempt: number;
  /**
   * Stable for this node in this run across retries and restarts: a `writes` node records or checks
   * it so that what it changes changes once.
   */
  readonly idempotencyKey: string;
  readonly params: Params;
  /** The value on each input port an edge feeds (absent for an optional port with no edge). */
  readonly inputs: Record<string, unknown>;
  /** Decisions of the approval nodes upstream of this node (its own decision, for an approval node). */
  readonly approvals: readonly CanvasApprovalV2[];
  /** A line of progress, streamed as a `node.log` event and stored with the run; `data` is JSON. */
  log(message: string, data?: Record<string, unknown>): void;
  /** Aborts on cancellation and when the node's timeout passes. */
  readonly signal: AbortSignal;
  /** The run's working tree: one git repository per run, shared by its nodes. */
  readonly workspace: CanvasWorkspaceV2;
  /** Files the run keeps for its owner to download (a screenshot, a report). */
  readonly artifacts: CanvasArtifactsV2;
  /** What the host does for nodes on the wallet's behalf (charged to its ledger). */
  readonly services: CanvasServicesV2;
}

export interface CanvasWorkspaceV2 {
  /**
   * Absolute path of the run's working tree: a git repository on branch `main` with at least one
   * commit where git is installed, a plain directory where it is not (a node that needs git then
   * fails with `unavailable`, reason `git_missing`).
   */
  readonly dir: string;
  /**
   * Where the host serves the working tree's files over HTTP, read-only, to anyone holding the URL (an
   * unguessable token in its path), ending in `/`: what a browser node opens to check a page a
   * write node made. Absent where the host serves no previews.
   */
  readonly previewUrl?: string;
}

export interface CanvasArtifactsV2 {
  /** Stores a file of the run; its id is what `GET /canvas/runs/:id/artifacts/:artifactId` serves. */
  put(name: string, contentType: string, content: Uint8Array): Promise<CanvasArtifactV2>;
}

export interface CanvasArtifactV2 {
  id: string;
  name: string;
  contentType: string;
  bytes: number;
  sha256: string;
}

export interface CanvasServicesV2 {
  /** A model turn with the wallet's own key (BYOK), charged to the run's agent like a chat turn. */
  llm(request: CanvasLlmRequestV2, signal: AbortSignal): Promise<CanvasLlmResultV2>;
  /** A gateway tool through the delegated path (the wallet's JWT, the run's session), paid as in chat. */
  callTool(request: CanvasToolRequestV2, signal: AbortSignal): Promise<CanvasToolResultV2>;
  /** The tools of gateway servers, for a node that lets a model choose (team mode). */
  listTools(servers: readonly string[], signal: AbortSignal): Promise<CanvasToolInfoV2[]>;
  /**
   * A secret of the wallet's vault by slot (a forge token); the host redacts it from events and logs.
   * Rejects with `forbidden`, reason `vault_locked` or `provider_key_missing`, when it is not there.
   */
  secret(slot: string): Promise<string>;
}

export interface CanvasLlmRequestV2 {
  /** A model a loaded llm-provider offers; the run's agent's model when absent. */
  model?: string;
  system?: string;
  prompt: string;
  /** JSON Schema the answer must be JSON of; the result's `json` then holds it, validated. */
  schema?: Record<string, unknown>;
  maxOutputTokens?: number;
}

export interface CanvasLlmResultV2 {
  text: string;
  /** The parsed answer, when `schema` was given (validated against it). */
  json?: unknown;
  model: string;
  inputTokens: number;
  outputTokens: number;
}

export interface CanvasToolRequestV2 {
  server: string;
  tool: string;
  arguments: Record<string, unknown>;
}

export interface CanvasToolResultV2 {
  /** The tool's text content, joined. */
  text: string;
  /** The tool's structured content (MCP `structuredContent`), when it returned one, as it came. */
  structuredContent?: Record<string, unknown>;
  isError: boolean;
}

export interface CanvasToolInfoV2 {
  server: string;
  name: string;
  description?: string;
  inputSchema: Record<string, unknown>;
}
