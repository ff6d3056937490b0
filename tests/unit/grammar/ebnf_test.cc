// GBNF front-end: grammars in the style of llama.cpp's examples (JSON, arithmetic, lists, a
// C-like language; written for this test from the dialect description), checked on positive
// and negative strings with the reference recognizer, plus the dialect's corners and errors.
#include <gtest/gtest.h>

#include <string>

#include "ladle/grammar/grammar.h"
#include "reference_recognizer.h"

namespace ladle::grammar {
namespace {

ReferenceRecognizer Compile(std::string_view text) {
  auto g = EbnfGrammar(text);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  if (!g.ok()) return std::move(ReferenceRecognizer::Create(*EbnfGrammar("root ::= [^\\x00-\\U0010FFFF]")).value());
  auto r = ReferenceRecognizer::Create(*g);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

Status ErrorOf(std::string_view text) {
  auto g = EbnfGrammar(text);
  return g.ok() ? Status::Ok() : g.status();
}

constexpr std::string_view kJson = R"gbnf(
# A JSON value, whitespace allowed around tokens.
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: a bounded run, as llama.cpp's generated grammars write it.
ws ::= | " " | "\n" [ \t]{0,20}
)gbnf";

TEST(Ebnf, JsonGrammar) {
  auto r = Compile(kJson);
  EXPECT_TRUE(r.Matches(R"({"a": 1, "b": [true, null, "x\n\u00e9"], "c": {"d": -2.5e3}})"));
  EXPECT_TRUE(r.Matches("{}"));
  EXPECT_TRUE(r.Matches("{ \"k\":\n  \"v\" }"));
  EXPECT_TRUE(r.Matches("{\"caf\xC3\xA9\": \"\xE4\xB8\xAD\"}"));
  EXPECT_FALSE(r.Matches("[1]"));            // root is an object
  EXPECT_FALSE(r.Matches("{\"a\" 1}"));
  EXPECT_FALSE(r.Matches("{\"a\": 01x}"));
  EXPECT_FALSE(r.Matches("{\"a\": \"\x01\"}"));  // raw control character
  EXPECT_FALSE(r.Matches("{\"a\": \"\\q\"}"));
  EXPECT_TRUE(r.IsPrefix("{\"a\": [1, {\"b\""));
  EXPECT_FALSE(r.IsPrefix("{\"a\": ]"));
}

constexpr std::string_view kArithmetic = R"gbnf(
root  ::= (expr "=" ws term "\n")+
expr  ::= term ([-+*/] ws term)*
term  ::= ident | num | "(" ws expr ")" ws
ident ::= [a-z] [a-z0-9_]* ws
num   ::= [0-9]+ ws
ws    ::= [ \t\n]*
)gbnf";

TEST(Ebnf, ArithmeticGrammar) {
  auto r = Compile(kArithmetic);
  EXPECT_TRUE(r.Matches("1+2=3\n"));
  EXPECT_TRUE(r.Matches("(a + b)*c = d\nx=1\n"));
  EXPECT_TRUE(r.Matches("((x))=y\n"));
  EXPECT_FALSE(r.Matches("1+=3\n"));
  EXPECT_FALSE(r.Matches("(1=2\n"));
  EXPECT_FALSE(r.Matches("1=2"));  // missing the newline
  EXPECT_TRUE(r.IsPrefix("(a + (b"));
}

constexpr std::string_view kList = R"gbnf(
root ::= ("- " item)+
item ::= [^\n]+ "\n"
)gbnf";

TEST(Ebnf, ListGrammar) {
  auto r = Compile(kList);
  EXPECT_TRUE(r.Matches("- milk\n- eggs \xF0\x9F\xA5\x9A\n"));
  EXPECT_FALSE(r.Matches("- \n"));
  EXPECT_FALSE(r.Matches("* milk\n"));
  EXPECT_FALSE(r.Matches("- milk"));
}

constexpr std::string_view kCLike = R"gbnf(
root ::= (declaration)*

declaration ::= dataType identifier "(" parameter? ")" "{" statement* "}"

dataType  ::= "int" ws | "float" ws | "char" ws
identifier ::= [a-zA-Z_] [a-zA-Z_0-9]*

parameter ::= dataType identifier

statement ::=
    ( dataType identifier ws "=" ws expression ";" ) |
    ( identifier ws "=" ws expression ";" ) |
    ( identifier ws "(" argList? ")" ";" ) |
    ( "return" ws expression ";" ) |
    ( "while" "(" condition ")" "{" statement* "}" ) |
    ( "for" "(" forInit ";" ws condition ";" ws forUpdate ")" "{" statement* "}" ) |
    ( "if" "(" condition ")" "{" statement* "}" ("else" "{" statement* "}")? ) |
    ( singleLineComment ) |
    ( multiLineComment )

forInit ::= dataType identifier ws "=" ws expression | identifier ws "=" ws expression
forUpdate ::= identifier ws "=" ws expression

condition ::= expression relationOperator expression
relationOperator ::= ("<=" | "<" | "==" | "!=" | ">=" | ">")

expression ::= term (("+" | "-") term)*
term ::= factor(("*" | "/") factor)*

factor ::= identifier | number | unaryTerm | funcCall | parenExpression
unaryTerm ::= "-" factor
funcCall ::= identifier "(" argList? ")"
parenExpression ::= "(" ws expression ws ")"

argList ::= expression ("," ws expression)*

number ::= [0-9]+

singleLineComment ::= "//" [^\n]* "\n"
multiLineComment ::= "/*" ( [^*] | ("*" [^/]) )* "*/"

ws ::= ([ \t\n]+)
)gbnf";

TEST(Ebnf, CLikeGrammar) {
  auto r = Compile(kCLike);
  EXPECT_TRUE(r.Matches("int main(){int x = 1;x = x+2*3;return x;}"));
  EXPECT_TRUE(r.Matches("float f(int a){while(a<10){a = a+1;}if(a==3){return a;}else{return 0;}}"));
  EXPECT_TRUE(r.Matches("int g(){// note\n/* block */return h(1, 2);}"));
  EXPECT_FALSE(r.Matches("int main(){x = ;}"));
  EXPECT_FALSE(r.Matches("int main(){return 1}"));
  EXPECT_TRUE(r.Matches(""));
}

TEST(Ebnf, LiteralsEscapesAndClasses) {
  auto r = Compile(R"(root ::= "a\tb\n\\\"\x41\u00e9\U0001F600" [\x00-\x1f\]\-] [^a-z\u4e00-\u9fff] .)");
  EXPECT_TRUE(r.Matches("a\tb\n\\\"A\xC3\xA9\xF0\x9F\x98\x80\x05" "A" "\xE2\x82\xAC"));
  EXPECT_TRUE(r.Matches("a\tb\n\\\"A\xC3\xA9\xF0\x9F\x98\x80]" "!" "\n"));
  EXPECT_TRUE(r.Matches("a\tb\n\\\"A\xC3\xA9\xF0\x9F\x98\x80-" "!" "x"));
  EXPECT_FALSE(r.Matches("a\tb\n\\\"A\xC3\xA9\xF0\x9F\x98\x80-" "q" "x"));
  EXPECT_FALSE(r.Matches("a\tb\n\\\"A\xC3\xA9\xF0\x9F\x98\x80-" "\xE4\xB8\xAD" "x"));
  // \xHH is a code point, not a byte: "\xE9" is é (C3 A9), as in llama.cpp.
  auto cp = Compile(R"(root ::= "\xE9")");
  EXPECT_TRUE(cp.Matches("\xC3\xA9"));
  EXPECT_FALSE(cp.Matches("\xE9"));
  // UTF-8 directly in the grammar.
  auto hira = Compile("root ::= [\xE3\x81\x81-\xE3\x82\x9F]+");
  EXPECT_TRUE(hira.Matches("\xE3\x81\x82\xE3\x82\x93"));
}

TEST(Ebnf, Repetition) {
  auto r = Compile(R"(root ::= "a"{2} "b"{1,} "c"{0,2} "d"{2,3} ("e" "f"){0,1} "g"? "h"* "i"+)");
  EXPECT_TRUE(r.Matches("aabdd" "i"));
  EXPECT_TRUE(r.Matches("aabbbccdddefghhhii"));
  EXPECT_FALSE(r.Matches("abdd" "i"));
  EXPECT_FALSE(r.Matches("aabcccddi"));
  EXPECT_FALSE(r.Matches("aabddddi"));
  EXPECT_FALSE(r.Matches("aabddefefi"));
  auto spaced = Compile("root ::= \"x\" { 2 , 3 } \"y\" *");
  EXPECT_TRUE(spaced.Matches("xxyyy"));
}

TEST(Ebnf, LayoutCommentsAndEmptyAlternatives) {
  // Outside parentheses a newline ends the rule, so a continuation line is an error.
  Status s = ErrorOf(R"gbnf(root ::= greeting
         ( ", " name )?
greeting ::= "hi"
)gbnf");
  EXPECT_EQ(s.code(), StatusCode::kParseError);
  EXPECT_NE(s.message().find("line 2:10"), std::string::npos) << s.ToString();

  auto ok = Compile(R"gbnf(
# leading comment
root ::= greeting ( ", " name )? space
greeting ::= "hi" |
  "hello"
name ::= (
  "bob"   # comment inside
  | "alice"
)
space ::= | " "
)gbnf");
  EXPECT_TRUE(ok.Matches("hi"));
  EXPECT_TRUE(ok.Matches("hello, alice "));
  EXPECT_FALSE(ok.Matches("hey"));
}

TEST(Ebnf, SpecialTokenExtension) {
  auto g = EbnfGrammar(R"(root ::= "call" <[128825]> [a-z]+ <[128825]>)");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  std::vector<Symbol> in = BytesToSymbols("call");
  in.push_back(SpecialSymbol(128825));
  for (Symbol s : BytesToSymbols("fn")) in.push_back(s);
  in.push_back(SpecialSymbol(128825));
  EXPECT_TRUE(ReferenceMatches(*g, in));
  // The token's text spelled as bytes is not the token.
  EXPECT_FALSE(ReferenceMatches(*g, std::string_view("call<[128825]>fn<[128825]>")));
  EXPECT_NE(g->ToString().find("<[128825]>"), std::string::npos);
}

TEST(Ebnf, RecursionAcrossRules) {
  auto r = Compile(R"gbnf(
root ::= list
list ::= "(" (item (" " item)*)? ")"
item ::= list | [a-z]+
)gbnf");
  EXPECT_TRUE(r.Matches("(a (b c) (d (e)) ())"));
  EXPECT_FALSE(r.Matches("(a (b c)"));
}

TEST(Ebnf, Errors) {
  struct Case {
    const char* text;
    StatusCode code;
    const char* where;
  };
  const Case cases[] = {
      {"item ::= \"x\"", StatusCode::kParseError, "no 'root' rule"},
      {"root ::= item\n", StatusCode::kParseError, "undefined rule 'item' at line 1:10"},
      {"root ::= \"a\"\n\nroot ::= \"b\"", StatusCode::kParseError, "defined twice at line 3:1"},
      {"root ::= \"abc", StatusCode::kParseError, "unterminated string literal at line 1:10"},
      {"root ::= [abc", StatusCode::kParseError, "unterminated character class at line 1:10"},
      {"root ::= [z-a]", StatusCode::kParseError, "out of order at line 1:12"},
      {"root ::= (\"a\"", StatusCode::kParseError, "missing ')' at line 1:10"},
      {"root ::= \"a\")", StatusCode::kParseError, "line 1:13"},
      {"root := \"a\"", StatusCode::kParseError, "expected '::=' after the rule name at line 1:6"},
      {"root ::= *", StatusCode::kParseError, "nothing to repeat at line 1:10"},
      {"root ::= \"a\"{3,2}", StatusCode::kParseError, "m > n at line 1:13"},
      {"root ::= \"a\"{x}", StatusCode::kParseError, "expected a number at line 1:14"},
      {"root ::= \"\\q\"", StatusCode::kParseError, "unknown escape '\\q' at line 1:11"},
      {"root ::= \"\\x4\"", StatusCode::kParseError, "hex digits at line 1:11"},
      {"root ::= \"\\uD800\"", StatusCode::kParseError, "surrogate code point cannot be UTF-8 text at line 1:11"},
      {"root ::= \"\xFF\"", StatusCode::kParseError, "invalid UTF-8 at line 1:11"},
      {"root ::= <[abc]>", StatusCode::kParseError, "expected a token id in '<[...]>' at line 1:10"},
      {"root ::= <[12]", StatusCode::kParseError, "']>'"},
      {"root ::= <tok>", StatusCode::kParseError, "<[token-id]>"},
      {"root ::= \"a\"{10001}", StatusCode::kResourceExhausted, "counted repeat above 10000 at line 1:14"},
      {"\n\n  root ::= x\nx ::= \"a\" @", StatusCode::kParseError, "unexpected '@' (expected the end of rule 'x') at line 4:11"},
  };
  for (const Case& c : cases) {
    Status s = ErrorOf(c.text);
    EXPECT_EQ(s.code(), c.code) << c.text << " -> " << s.ToString();
    EXPECT_NE(s.message().find(c.where), std::string::npos) << c.text << " -> " << s.ToString();
  }
}

TEST(Ebnf, NestingDepthIsBounded) {
  std::string ok = "root ::= " + std::string(200, '(') + "\"a\"" + std::string(200, ')');
  EXPECT_TRUE(Compile(ok).Matches("a"));
  std::string deep = "root ::= " + std::string(100000, '(');
  Status s = ErrorOf(deep);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("line 1:266"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace ladle::grammar
