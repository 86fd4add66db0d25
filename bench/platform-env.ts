// The environment of a whole platform (`rc start`) a benchmark runs: every server on an ephemeral
// port, the embedded sims without delays, its data under `dataDir`. Each bench (and the tests'
// platformTestEnv) adds its own.
export function ephemeralPlatformEnv(dataDir: string): Record<string, string> {
  return {
    RC_DATA_DIR: dataDir,
    RC_API_PORT: '0',
    RC_GATEWAY_PORT: '0',
    RC_AGENT_PORT: '0',
    RC_SIM_PORT_BASE: '0',
    RC_PROXY_PORT: '0',
    RC_TUNNEL_PORT: '0',
    RC_METRICS_PORT: '0',
    RC_CONTROL_METRICS_PORT: '0',
    RC_SIM_FAST: '1',
  };
}
