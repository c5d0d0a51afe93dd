package server

// WithStoreWrapper wraps the server's store, so that a test can inject a
// fault between what a request reads and what it writes.
var WithStoreWrapper = withStoreWrapper
var WithAuditWrapper = withAuditWrapper

// WithQuotaCheck sets how often the server reads the usage to log the
// NOSPACE alarm.
var WithQuotaCheck = withQuotaCheck
