from connector.cli import app

app(prog_name="connector")
