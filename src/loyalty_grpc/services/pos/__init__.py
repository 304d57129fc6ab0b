"""The POS API's use cases, one module per endpoint (`ping`, `fan/resolve`, `tx`,
`redeem`, `promos`, `codes`, `roster`): what a cashier's terminal or a CRM calls."""
