package envoytest

// HotPathPolicy is the shape of bench/peer.sh's load: one descriptor (or
// one HTTP route) with a limit that is never reached, per key.
const HotPathPolicy = `
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000, algorithm: fixed_window}
http:
  tenant: {header: x-tenant-id}
  routes:
    - name: api
      path_prefix: /
      rate_limits: [{requests_per_unit: 1000000000, unit: second, algorithm: fixed_window}]
`
