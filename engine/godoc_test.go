package engine

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// go doc shows an alias's own comment, not its type's fields: the
// comments of the aliased types users handle list every field, which
// this keeps true as fields are added (issue 45, 8).
func TestAliasDocsListFields(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, f := range pkgs["engine"].Files {
		files = append(files, f)
	}
	p, err := doc.NewFromFiles(fset, files, "github.com/redlease/redlease/engine")
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{}
	for _, typ := range p.Types {
		docs[typ.Name] = typ.Doc
	}
	for name, v := range map[string]any{"Event": Event{}, "NodeOutcome": NodeOutcome{}, "ExtendError": ExtendError{}} {
		typ := reflect.TypeOf(v)
		for i := range typ.NumField() {
			f := typ.Field(i)
			if !f.IsExported() {
				continue
			}
			if !regexp.MustCompile(`(?m)^\t` + f.Name + ` +\S`).MatchString(docs[name]) {
				t.Errorf("the doc of %s does not list its field %s:\n%s", name, f.Name, docs[name])
			}
		}
	}
}
