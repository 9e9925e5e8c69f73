package envoytest

// HostileValues are byte strings that must each get their own counter.
// Pairs that a careless encoding would merge sit next to each other.
var HostileValues = []string{
	"plain", "\xff", "\uFDD0FF", "%FF", "\uFDD0\uFDD0FF", "\uFDD0", "\uFDD0\uFDD0",
	"\xff\xfe", "\ufffd", "\xef\xbf", "a\x80b", "a\uFDD080b",
	"\x00", "a\x00b", "a%00b", "{", "}", "{x}", "|", "a|b=c", "a|b%3Dc", ":", "a:b",
	"%", "%25", "#", "#abc", "=", "\r\n", " ", "é", "e\u0301", "\xed\xa0\x80", // a UTF-16 surrogate
	"\xc0\xaf", // overlong '/'
}
